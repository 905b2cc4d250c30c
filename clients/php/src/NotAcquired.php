<?php

declare(strict_types=1);

namespace Dlock;

/**
 * The lock (or permit, or units of stock) was not acquired within the wait:
 * Client::synchronized() throws it, where Client::lock() returns null.
 */
class NotAcquired extends \RuntimeException implements Exception
{
}
