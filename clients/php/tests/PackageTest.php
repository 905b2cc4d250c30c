<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use PHPUnit\Framework\TestCase;

/** The package as Composer and a user without Composer see it. */
final class PackageTest extends TestCase
{
    /** composer.json's version, Client::VERSION and dlock's own (include/dlock.h) agree. */
    public function testVersionIsTheProjects(): void
    {
        $header = file_get_contents(__DIR__ . '/../../../include/dlock.h');
        $this->assertSame(1, preg_match('/#define DLOCK_VERSION_STRING "([^"]+)"/', $header, $m));
        $composer = json_decode(file_get_contents(__DIR__ . '/../composer.json'), true, 8, JSON_THROW_ON_ERROR);
        $this->assertSame($m[1], $composer['version']);
        $this->assertSame($m[1], Client::VERSION);
        $this->assertSame('dlock/dlock', $composer['name']);
        $this->assertSame(['Dlock\\' => 'src/'], $composer['autoload']['psr-4']);
    }

    /**
     * Every class, interface and trait under src/ is where PSR-4 says, loads through
     * autoload.php alone (in a fresh php, without PHPUnit's bootstrap), and every
     * exception implements Dlock\Exception. But for those that extend another
     * library's classes (Symfony's, predis's), which that library's autoloader loads.
     */
    public function testEveryClassLoadsFromAutoloadPhp(): void
    {
        $src = realpath(__DIR__ . '/../src');
        $classes = [];
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($src, \FilesystemIterator::SKIP_DOTS));
        foreach ($files as $file) {
            $rel = substr($file->getPathname(), strlen($src) + 1, -4);
            $classes[] = 'Dlock\\' . str_replace('/', '\\', $rel);
        }
        sort($classes);
        $script = sprintf(
            'require %s; foreach (%s as $c) { if (!class_exists($c) && !interface_exists($c) && !trait_exists($c)) { echo "missing $c\n"; } }'
            . ' foreach (["NotAcquired", "LockLost", "Unavailable", "NoQuorum", "AuthFailed", "ProtocolError",'
            . ' "CommandError", "InvalidArgument", "OutOfStock"] as $e) { if (!is_subclass_of("Dlock\\\\$e", "Dlock\\\\Exception")) { echo "not an exception: $e\n"; } }'
            . ' echo "ok\n";',
            var_export(realpath(__DIR__ . '/../autoload.php'), true),
            var_export(array_filter($classes, fn ($c) => !str_starts_with($c, 'Dlock\\Symfony\\')
                && $c !== 'Dlock\\Internal\\PredisStream'), true)
        );
        $out = shell_exec(escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg($script) . ' 2>&1');
        $this->assertSame("ok\n", $out);
        $this->assertContains('Dlock\\Symfony\\DlockdStore', $classes);
        $this->assertContains('Dlock\\Internal\\PredisStream', $classes);
    }
}
