<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\ProtocolError;
use Dlock\Unavailable;
use Predis\CommunicationException;
use Predis\Connection\NodeConnectionInterface;
use Predis\Response\ErrorInterface;

/**
 * Client::observe(): SUBSCRIBE leader:NAME on a connection of its own, with each Redis
 * client's pub/sub, until the callable says stop or the time is up. The connection is
 * closed at the end, however it ends: a subscribed connection takes no other command,
 * and closing it is how a subscription is left at once, without reading what was
 * published meanwhile.
 *
 * @internal
 */
final class Observe
{
    /**
     * Calls $onChange(term, value) for each message of the channel until it returns
     * false, or $timeoutS seconds have passed (null: no end).
     */
    public static function run(\Redis|\Predis\Client $redis, string $channel, callable $onChange, ?float $timeoutS): void
    {
        $deadline = $timeoutS === null ? null : microtime(true) + $timeoutS;
        if ($redis instanceof \Redis) {
            self::phpredis($redis, $channel, $onChange, $deadline);
        } else {
            self::predis($redis, $channel, $onChange, $deadline);
        }
    }

    /**
     * A message's payload: "TERM VALUE" (split at the first space: the value may hold
     * spaces, or be empty), or "0" when no one leads.
     *
     * @return array{int, ?string}
     */
    public static function parse(mixed $payload, string $channel): array
    {
        if (is_string($payload)) {
            if ($payload === '0') {
                return [0, null];
            }
            $space = strpos($payload, ' ');
            $term = $space === false ? '' : substr($payload, 0, $space);
            if (preg_match('/^[1-9][0-9]{0,18}$/', $term) === 1 && (string) (int) $term === $term) {
                return [(int) $term, substr($payload, $space + 1)];
            }
        }
        throw new ProtocolError(sprintf(
            "dlockd: a message of '%s' was %s, not 'TERM VALUE' or '0'",
            $channel,
            Args::show($payload)
        ));
    }

    /**
     * phpredis's subscribe() runs its own loop, which neither a callback's return value
     * nor its exception ends (phpredis 5.3 reads on after both); closing the connection
     * from the callback does, with a RedisException that is ours, not a failure. The
     * read timeout is the time left, set again after each message; a read that times
     * out at the deadline is the end of the wait, not a failure either.
     */
    private static function phpredis(\Redis $r, string $channel, callable $onChange, ?float $deadline): void
    {
        $stopped = false;
        $thrown = null;
        $timeout = static function () use ($deadline): float {
            // A millisecond over, as poll() counts whole ones: never a timeout before the
            // deadline, which would read as a failure.
            return $deadline === null ? -1.0 : max(0.001, $deadline - microtime(true)) + 0.001;
        };
        $reply = null;
        $failure = null;
        try {
            try {
                $r->setOption(\Redis::OPT_READ_TIMEOUT, $timeout());
                $reply = $r->subscribe([$channel], static function (\Redis $r, string $chan, mixed $payload) use (
                    $channel,
                    $onChange,
                    $deadline,
                    $timeout,
                    &$stopped,
                    &$thrown
                ): void {
                    try {
                        [$term, $value] = self::parse($payload, $channel);
                        $go = $onChange($term, $value) !== false;
                    } catch (\Throwable $e) {
                        $thrown = $e;
                        $go = false;
                    }
                    if (!$go || ($deadline !== null && microtime(true) >= $deadline)) {
                        $stopped = true;
                        $r->close();
                        return;
                    }
                    if ($deadline !== null) {
                        $r->setOption(\Redis::OPT_READ_TIMEOUT, $timeout());
                    }
                });
            } catch (\RedisException $e) {
                $failure = $e;
            }
            if ($thrown !== null) {
                throw $thrown;
            }
            if ($stopped || self::due($deadline)) {
                return;
            }
            if ($failure !== null) {
                $message = $failure->getMessage();
                throw Replies::code($message) !== null
                    ? Replies::error($message)
                    : new Unavailable("dlockd: observing '$channel': $message", 0, $failure);
            }
            self::refused($r, $channel, $reply);
        } finally {
            try {
                $r->close();
            } catch (\RedisException) {
            }
        }
    }

    /**
     * phpredis's subscribe() returns at once when dlockd refused the subscription (a
     * NOAUTH, say), and keeps no word of why: the same SUBSCRIBE as a raw command, which
     * does keep dlockd's error line, says it as this package's exception.
     */
    private static function refused(\Redis $r, string $channel, mixed $reply): never
    {
        $again = (new PhpRedisConnection($r))->call(['SUBSCRIBE', $channel]);
        throw new ProtocolError(sprintf(
            'dlockd: SUBSCRIBE %s was refused without an error (phpredis answered %s), then answered %s',
            $channel,
            Args::show($reply),
            Args::show($again)
        ));
    }

    /**
     * predis, reply by reply on its connection: SUBSCRIBE written as predis writes a
     * command, then each message read as a reply, with the stream's timeout set to the
     * time left before each read. Its PubSub\Consumer (pubSubLoop()) is not used: it
     * reads every reply as an array, so an error reply to SUBSCRIBE would be a PHP
     * Error there rather than this package's exception.
     */
    private static function predis(\Predis\Client $client, string $channel, callable $onChange, ?float $deadline): void
    {
        $node = $client->getConnection();
        if (!$node instanceof NodeConnectionInterface) {
            throw new ProtocolError('dlock: predis must be connected to one dlockd');
        }
        try {
            $node->writeRequest($client->createCommand('SUBSCRIBE', [$channel]));
            for (;;) {
                $stream = $node->getResource();
                if (is_resource($stream) && get_resource_type($stream) === 'stream') {
                    PredisConnection::setTimeout(
                        $stream,
                        $deadline === null ? -1.0 : max(0.001, $deadline - microtime(true)) + 0.001
                    );
                }
                $reply = $node->read();
                if ($reply instanceof ErrorInterface) {
                    throw Replies::error($reply->getMessage());
                }
                if (!is_array($reply) || count($reply) !== 3 || !in_array($reply[0], ['subscribe', 'message'], true)) {
                    throw new ProtocolError("dlockd: observing '$channel', a reply that is no message: " . Args::show($reply));
                }
                if ($reply[0] === 'message') {
                    [$term, $value] = self::parse($reply[2], $channel);
                    if ($onChange($term, $value) === false) {
                        return;
                    }
                }
                if (self::due($deadline)) {
                    return;
                }
            }
        } catch (CommunicationException $e) {
            if (!self::due($deadline)) {
                throw new Unavailable("dlockd: observing '$channel': " . $e->getMessage(), 0, $e);
            }
        } finally {
            $client->disconnect();
        }
    }

    private static function due(?float $deadline): bool
    {
        return $deadline !== null && microtime(true) >= $deadline;
    }
}
