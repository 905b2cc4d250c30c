<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

use Dlock\Exception;

/** What the package's test cases share: unique names, elapsed time, exact exceptions. */
trait Helpers
{
    private static int $seq = 0;

    /** A lock name no other test uses. */
    private function name(string $what): string
    {
        return sprintf('%s:%d:%d', $what, getmypid(), ++self::$seq);
    }

    /** Milliseconds since $since (an hrtime(true)). */
    private static function ms(int $since): float
    {
        return (hrtime(true) - $since) / 1e6;
    }

    /**
     * The exception $fn throws, which must be exactly of class $class (never the Redis
     * client's own) and, unless $dlock is false, a Dlock\Exception. $what names the case
     * in a failure's message.
     */
    private function throws(string $class, callable $fn, string $what = '', bool $dlock = true): \Throwable
    {
        $prefix = $what === '' ? '' : "$what: ";
        try {
            $fn();
        } catch (\Throwable $e) {
            $this->assertSame($class, get_class($e), $prefix . $e->getMessage());
            if ($dlock) {
                $this->assertInstanceOf(Exception::class, $e);
            }
            return $e;
        }
        $this->fail("{$prefix}no $class thrown");
    }
}
