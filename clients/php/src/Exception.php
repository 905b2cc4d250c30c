<?php

declare(strict_types=1);

namespace Dlock;

/**
 * What every exception of this package implements: `catch (Dlock\Exception $e)` catches
 * each one, whichever Redis client (phpredis or predis) is underneath.
 *
 * An interface, so that each exception can also extend the SPL class its kind calls for
 * (InvalidArgument is an \InvalidArgumentException, the others \RuntimeException).
 */
interface Exception extends \Throwable
{
}
