<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd refused the command (an `-ERR` reply): for example a session lock whose TTL
 * is under dlockd's floor, or a LOCK of a name this connection already holds. The
 * message is dlockd's.
 */
class CommandError extends \RuntimeException implements Exception
{
}
