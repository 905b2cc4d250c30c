<?php

declare(strict_types=1);

namespace Dlock;

/**
 * A lock was lost while held: its lease ran out before it could be renewed, it was
 * broken by an operator, or another client released it with its token. Thrown by
 * synchronized() when the release finds the lock gone (the callable ran, but not
 * wholly under the lock), and by any call that reads dlockd's `-LOST` reply.
 */
class LockLost extends \RuntimeException implements Exception
{
}
