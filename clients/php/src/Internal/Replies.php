<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\AuthFailed;
use Dlock\CommandError;
use Dlock\Exception;
use Dlock\LockLost;
use Dlock\NoQuorum;
use Dlock\ProtocolError;
use Dlock\Unavailable;

/**
 * dlockd's error replies as this package's exceptions, by the code word each one starts
 * with. phpredis returns some of them and throws others, predis returns them as
 * strings; the adapters hand every one to error().
 *
 * @internal
 */
final class Replies
{
    /** The code words that name an error reply (a line that is not one is an I/O error). */
    private const CODES = [
        'ERR' => CommandError::class,
        'NOQUORUM' => NoQuorum::class,
        'UNAVAILABLE' => Unavailable::class,
        // A draining dlockd takes no new lock: another dlockd, or later, will.
        'SHUTDOWN' => Unavailable::class,
        'LOADING' => Unavailable::class,
        'LOST' => LockLost::class,
        'NOAUTH' => AuthFailed::class,
        'WRONGPASS' => AuthFailed::class,
        'NOPERM' => AuthFailed::class,
        'NOPROTO' => ProtocolError::class,
    ];

    /** The code word of an error reply's line, or null when the line is not one. */
    public static function code(string $line): ?string
    {
        $word = strstr($line, ' ', true);
        $word = $word === false ? $line : $word;
        return isset(self::CODES[$word]) ? $word : null;
    }

    /** The exception for an error reply's line (without the leading '-'). */
    public static function error(string $line): Exception
    {
        $code = self::code($line);
        if ($code === null) {
            return new ProtocolError("dlockd: unexpected error reply: $line");
        }
        // dlockd closes the connection after a protocol error: the request broke RESP.
        if (str_starts_with($line, 'ERR Protocol error')) {
            return new ProtocolError("dlockd: $line");
        }
        // This package sends dlockd's commands only: a server that knows none of them
        // is not dlockd (a redis-server on that port), or a dlockd older than it.
        if (str_starts_with($line, 'ERR unknown command')) {
            return new ProtocolError("dlockd: $line: is this dlockd, and as new as this package?");
        }
        $class = self::CODES[$code];
        return new $class("dlockd: $line");
    }

    /** Whether an error leaves the connection closed by dlockd. */
    public static function closes(Exception $e): bool
    {
        return $e instanceof LockLost || $e instanceof ProtocolError;
    }
}
