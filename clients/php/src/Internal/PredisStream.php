<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Predis\Connection\ParametersInterface;
use Predis\Connection\StreamConnection;

/**
 * predis 1's stream connection, each stream with a context of its own, for dlockds://.
 *
 * predis 1 opens its streams with no context, so they share PHP's default one, and its
 * TLS set-up then writes the URL's ssl options into that: after one dlockds:// client
 * with a cafile, every later TLS stream of the process (predis's or not, a
 * file_get_contents('https://...') included) would trust that CA instead of the
 * system's, and one with a cert would offer it to every TLS peer. predis 2 gives each
 * stream its own context already, and is left alone.
 *
 * @internal
 */
final class PredisStream extends StreamConnection
{
    /** Whether the installed predis needs this class (its major version is 1). */
    public static function needed(): bool
    {
        return version_compare(\Predis\Client::VERSION, '2.0.0', '<');
    }

    /**
     * @param string $address
     * @param int    $flags
     *
     * @return resource
     */
    protected function createStreamSocket(ParametersInterface $parameters, $address, $flags)
    {
        $timeout = isset($parameters->timeout) ? (float) $parameters->timeout : 5.0;
        $stream = @stream_socket_client($address, $errno, $errstr, $timeout, $flags, stream_context_create());
        if ($stream === false) {
            $this->onConnectionError(trim($errstr), $errno);
        }
        if (isset($parameters->read_write_timeout)) {
            $rw = (float) $parameters->read_write_timeout;
            PredisConnection::setTimeout($stream, $rw > 0 ? $rw : -1.0);
        }
        return $stream;
    }
}
