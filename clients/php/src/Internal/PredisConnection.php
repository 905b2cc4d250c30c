<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\InvalidArgument;
use Dlock\ProtocolError;
use Dlock\Unavailable;
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
final class PredisConnection extends BaseConnection
{
    public function __construct(private \Predis\Client $client)
    {
        if (!$client->getConnection() instanceof NodeConnectionInterface) {
            throw new InvalidArgument(
                'dlock: predis must be connected to one dlockd, not a cluster or replication set'
            );
        }
    }

    protected function send(array $args, int $waitMs): mixed
    {
        $restore = false;
        try {
            $this->dropIfClosed();
            if ($waitMs !== 0) {
                $restore = $this->raiseReadTimeout($waitMs);
            }
            $reply = $this->client->executeRaw($args, $error);
        } catch (ProtocolException $e) {
            $this->drop();
            throw new ProtocolError('dlockd: ' . $e->getMessage(), 0, $e);
        } catch (CommunicationException $e) {
            // predis reports an error reply to its connect-time AUTH as "`AUTH` failed:
            // WRONGPASS ...": a reply, but the connection is closed after it.
            $line = preg_replace('/^`[A-Z]+` failed: /', '', $e->getMessage());
            if ($line !== $e->getMessage() && Replies::code($line) !== null) {
                $this->drop();
                throw Replies::error($line);
            }
            throw $this->failure($e->getMessage(), false, $e);
        } finally {
            if ($restore) {
                $this->restoreReadTimeout();
            }
        }
        if ($error) {
            throw $this->failure((string) $reply, true);
        }
        return $reply;
    }

    /**
     * A Predis\Client of the application's connection parameters (address, timeouts,
     * TLS, password), not persistent. Commands the application added to be sent at
     * connect are not among them (a client made by Client::connect() gets its
     * subscriber from the URL instead).
     */
    public function subscriber(): \Predis\Client
    {
        $params = $this->node()->getParameters()->toArray();
        $params['persistent'] = false;
        $client = new \Predis\Client($params);
        try {
            $client->connect();
        } catch (CommunicationException $e) {
            $line = preg_replace('/^`[A-Z]+` failed: /', '', $e->getMessage());
            throw Replies::code($line) !== null
                ? Replies::error($line)
                : new Unavailable('dlock: cannot connect to dlockd: ' . $e->getMessage(), 0, $e);
        }
        return $client;
    }

    protected function close(): void
    {
        // disconnect() is fclose(), which closes a persistent stream too.
        $this->node()->disconnect();
    }

    /**
     * A connection dlockd closed meanwhile (an idle timeout, a restart) is dropped
     * before the command is written, as phpredis does: written to it, the command
     * would fail as Unavailable though dlockd never ran it. feof() on a socket looks
     * without reading; data still waiting (a -LOST) keeps it open, to be read.
     */
    private function dropIfClosed(): void
    {
        $node = $this->node();
        if (!$node->isConnected()) {
            return;
        }
        $stream = $node->getResource();
        if (is_resource($stream) && get_resource_type($stream) === 'stream' && feof($stream)) {
            $this->drop();
        }
    }

    private function node(): NodeConnectionInterface
    {
        $node = $this->client->getConnection();
        assert($node instanceof NodeConnectionInterface);
        return $node;
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
        $stream = $node->getResource();
        if (!is_resource($stream) || get_resource_type($stream) !== 'stream') {
            // A connection class of predis's that is not a PHP stream (phpiredis):
            // its own timeout holds.
            return false;
        }
        self::setTimeout($stream, $waitMs < 0 ? -1.0 : $base + $waitMs / 1000);
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

    /**
     * Sets a stream's read timeout; a negative one is none.
     *
     * @param resource $stream
     */
    public static function setTimeout($stream, float $seconds): void
    {
        if ($seconds < 0) {
            // A stream's timeout cannot be "none"; a year is as good.
            $seconds = 365 * 86400;
        }
        $whole = (int) floor($seconds);
        stream_set_timeout($stream, $whole, (int) (($seconds - $whole) * 1e6));
    }
}
