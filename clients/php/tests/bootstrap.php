<?php

// The tests' classes, the package's (autoload.php, as a user without Composer loads
// it), and predis and Symfony Lock: from Composer's vendor/ when there is one, else
// from Debian's php-predis and php-symfony-lock. A missing one fails the run here,
// loudly: a test that needs something missing never skips.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Dlock\\Tests\\')) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 12)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$vendor = __DIR__ . '/../vendor/autoload.php';
if (is_file($vendor)) {
    require $vendor;
} else {
    foreach ([
        'predis (Debian: php-predis)' => '/usr/share/php/Predis/autoload.php',
        'Symfony Lock (Debian: php-symfony-lock)' => '/usr/share/php/Symfony/Component/Lock/autoload.php',
    ] as $what => $file) {
        if (!is_file($file)) {
            fwrite(STDERR, "dlock's PHP tests need $what: $file is missing\n");
            exit(1);
        }
        require $file;
    }
}
if (!extension_loaded('redis')) {
    fwrite(STDERR, "dlock's PHP tests need phpredis (Debian: php-redis)\n");
    exit(1);
}
if (getenv('DLOCKD') === false || !is_executable(getenv('DLOCKD'))) {
    fwrite(STDERR, "dlock's PHP tests need \$DLOCKD, the dlockd binary (make test sets it)\n");
    exit(1);
}
