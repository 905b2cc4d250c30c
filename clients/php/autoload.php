<?php

// The package's classes without Composer, as Debian's PHP packages ship theirs:
// `require '/path/to/clients/php/autoload.php';`. With Composer, its PSR-4 autoloader
// (composer.json) does the same.
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Dlock\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 6)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
