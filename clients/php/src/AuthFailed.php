<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd refused the connection's credentials: no password given where one is
 * required (NOAUTH), a wrong one (WRONGPASS), or a command this user may not run
 * (NOPERM).
 */
class AuthFailed extends \RuntimeException implements Exception
{
}
