<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Client;
use Dlock\InvalidArgument;
use Dlock\ProtocolError;

/**
 * The checks every argument gets before anything is sent, with dlockd's own limits, so
 * that a bad one is an InvalidArgument that names it rather than a round trip and an
 * `-ERR`; and the checks of dlockd's replies.
 *
 * @internal
 */
final class Args
{
    /** dlockd's limit on a lock name, a semaphore's or a SKU, in bytes. */
    public const NAME_MAX = 4096;
    /** The longest TTL, WAIT and lease dlockd takes, in ms (2^31 - 1). */
    public const MS_MAX = 2147483647;
    /** dlockd's limit on a quantity of stock. */
    public const QTY_MAX = 1000000000000;

    public static function name(string $name, string $what = 'lock name'): string
    {
        $len = strlen($name);
        if ($len === 0 || $len > self::NAME_MAX) {
            throw new InvalidArgument(
                sprintf('dlock: %s must be 1 to %d bytes, not %d', $what, self::NAME_MAX, $len)
            );
        }
        if (str_contains($name, "\0")) {
            throw new InvalidArgument("dlock: $what must not contain a NUL byte");
        }
        return $name;
    }

    /** The shortest lease dlockd gives anything, in ms (a session lock's floor is higher). */
    public const TTL_MIN = 10;

    /** A TTL or a lease, in ms: TTL_MIN to MS_MAX. */
    public static function ttl(int $ms, string $what = 'ttlMs'): string
    {
        if ($ms < self::TTL_MIN || $ms > self::MS_MAX) {
            throw new InvalidArgument(sprintf(
                'dlock: %s must be %d to %d ms, not %d',
                $what,
                self::TTL_MIN,
                self::MS_MAX,
                $ms
            ));
        }
        return (string) $ms;
    }

    /** A duration in ms from 0 to MS_MAX (MAXHOLD: 0 is "no limit"). */
    public static function ms(int $ms, string $what): string
    {
        if ($ms < 0 || $ms > self::MS_MAX) {
            throw new InvalidArgument(sprintf('dlock: %s must be 0 to %d ms, not %d', $what, self::MS_MAX, $ms));
        }
        return (string) $ms;
    }

    /**
     * A wait in ms as dlockd's WAIT takes it: 0 (try once) to MS_MAX, and
     * Client::FOREVER as -1. A negative wait is refused: it would read as "forever" to
     * some and "not at all" to others.
     */
    public static function wait(int $ms): int
    {
        if ($ms === Client::FOREVER) {
            return -1;
        }
        if ($ms < 0 || $ms > self::MS_MAX) {
            throw new InvalidArgument(sprintf(
                'dlock: waitMs must be 0 (try once) to %d ms, or Client::FOREVER; not %d',
                self::MS_MAX,
                $ms
            ));
        }
        return $ms;
    }

    public static function qty(int $qty, string $what = 'qty'): string
    {
        if ($qty < 1 || $qty > self::QTY_MAX) {
            throw new InvalidArgument(sprintf('dlock: %s must be 1 to %d, not %d', $what, self::QTY_MAX, $qty));
        }
        return (string) $qty;
    }

    /** dlockd's limit on a leader's value, in bytes (empty is a value too). */
    public const VALUE_MAX = 1024;

    /** A leader's value: what it announces to everyone who asks (its address, say). */
    public static function value(string $value): string
    {
        if (strlen($value) > self::VALUE_MAX) {
            throw new InvalidArgument(
                sprintf("dlock: a leader's value must be at most %d bytes, not %d", self::VALUE_MAX, strlen($value))
            );
        }
        if (str_contains($value, "\0")) {
            throw new InvalidArgument("dlock: a leader's value must not contain a NUL byte");
        }
        return $value;
    }

    public static function label(string $label): string
    {
        if ($label === '' || strlen($label) > 256 || str_contains($label, "\0")) {
            throw new InvalidArgument('dlock: label must be 1 to 256 bytes, without NUL');
        }
        return $label;
    }

    /** A 1 or 0 reply as a bool. */
    public static function bool(mixed $reply, string $command): bool
    {
        if ($reply !== 0 && $reply !== 1) {
            throw new ProtocolError("dlockd: $command replied " . self::show($reply) . ', not 1 or 0');
        }
        return $reply === 1;
    }

    /** A flat array of field/value pairs (LOCKINFO, STOCK's state) as an array. */
    public static function map(mixed $reply, string $command): array
    {
        if (!is_array($reply) || count($reply) % 2 !== 0) {
            throw new ProtocolError("dlockd: $command replied " . self::show($reply) . ', not field/value pairs');
        }
        $out = [];
        for ($i = 0; $i < count($reply); $i += 2) {
            $out[(string) $reply[$i]] = $reply[$i + 1];
        }
        return $out;
    }

    public static function show(mixed $reply): string
    {
        return substr(var_export($reply, true), 0, 200);
    }
}
