<?php

declare(strict_types=1);

namespace Dlock\Connection;

use Dlock\Exception;
use Dlock\InvalidArgument;
use Dlock\ProtocolError;
use Dlock\Unavailable;
use Predis\ClientInterface;
use Predis\CommunicationException;
use Predis\Connection\NodeConnectionInterface;
use Predis\Protocol\ProtocolException;

/**
 * dlockd through predis: every command is an executeRaw(), which returns an error reply
 * as a plain string and says so only through its second argument (unchecked, a
 * `-UNAVAILABLE ...` would read as a token). I/O failures throw CommunicationException,
 * after which predis has closed the connection and reconnects on the next command.
 *
 * @internal
 */
final class PredisConnection implements Connection
{
    private int $generation = 0;

    public function __construct(private ClientInterface $client)
    {
        if (!$client->getConnection() instanceof NodeConnectionInterface) {
            throw new InvalidArgument(
                'dlock: predis must be connected to one dlockd, not a cluster or replication set'
            );
        }
    }

    public function call(array $args, int $waitMs = 0): mixed
    {
        $restore = false;
        try {
            if ($waitMs !== 0) {
                $restore = $this->raiseReadTimeout($waitMs);
            }
            $reply = $this->client->executeRaw($args, $error);
        } catch (ProtocolException $e) {
            $this->drop();
            throw new ProtocolError('dlockd: ' . $e->getMessage(), 0, $e);
        } catch (CommunicationException $e) {
            throw $this->failure($e->getMessage(), $e);
        } finally {
            if ($restore) {
                $this->restoreReadTimeout();
            }
        }
        if ($error) {
            throw $this->failure((string) $reply, null);
        }
        return $reply;
    }

    public function abandon(): void
    {
        // disconnect() is fclose(), which closes a persistent stream too.
        $this->drop();
    }

    public function generation(): int
    {
        return $this->generation;
    }

    private function node(): NodeConnectionInterface
    {
        $node = $this->client->getConnection();
        assert($node instanceof NodeConnectionInterface);
        return $node;
    }

    private function failure(string $message, ?CommunicationException $e): Exception
    {
        // predis wraps an error reply to its connect-time AUTH: "`AUTH` failed: WRONGPASS ...".
        $line = preg_replace('/^`[A-Z]+` failed: /', '', $message);
        if (Replies::code($line) !== null) {
            $error = Replies::error($line);
            if ($e !== null || Replies::closes($error)) {
                $this->drop();
            }
            return $error;
        }
        $this->drop();
        return new Unavailable("dlockd: $message", 0, $e);
    }

    private function drop(): void
    {
        $this->generation++;
        $this->node()->disconnect();
    }

    /**
     * Sets the stream's read timeout to cover a wait of $waitMs more than the
     * connection's timeout for any other reply. The stream is predis's own (connected
     * now if it was not), so the timeout it gets at each connect comes back after.
     */
    private function raiseReadTimeout(int $waitMs): bool
    {
        $base = $this->baseReadTimeout();
        if ($base < 0) {
            return false;
        }
        $node = $this->node();
        $node->connect();
        $seconds = $waitMs < 0 ? -1.0 : $base + $waitMs / 1000;
        self::setTimeout($node->getResource(), $seconds);
        return true;
    }

    private function restoreReadTimeout(): void
    {
        $node = $this->node();
        if ($node->isConnected()) {
            self::setTimeout($node->getResource(), $this->baseReadTimeout());
        }
    }

    /** The read timeout predis gave the stream at connect, in seconds (-1: none). */
    private function baseReadTimeout(): float
    {
        $rw = $this->node()->getParameters()->read_write_timeout ?? null;
        if ($rw === null) {
            return (float) ini_get('default_socket_timeout');
        }
        return (float) $rw > 0 ? (float) $rw : -1.0;
    }

    /** @param resource $stream */
    private static function setTimeout($stream, float $seconds): void
    {
        if ($seconds < 0) {
            // A stream's timeout cannot be "none"; a year is as good.
            $seconds = 365 * 86400;
        }
        $whole = (int) floor($seconds);
        stream_set_timeout($stream, $whole, (int) (($seconds - $whole) * 1e6));
    }
}
