<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd's reply was not what the command calls for, or dlockd reported a protocol
 * error: a bug on one side, or something that is not dlockd on that port (a
 * redis-server answers `unknown command 'LOCK'`), or a dlockd older than this package.
 */
class ProtocolError extends \RuntimeException implements Exception
{
}
