<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd's reply was not what the command calls for, or dlockd reported a protocol
 * error: a bug on one side, or something that is not dlockd on that port.
 */
class ProtocolError extends \RuntimeException implements Exception
{
}
