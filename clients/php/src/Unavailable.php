<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd or its lock servers could not be reached, did not answer in time, or are
 * shutting down: try again later (or through another dlockd). A command that failed
 * this way may or may not have been applied; a lock it may have taken is released by
 * dlockd when the connection closes, or expires with its lease.
 */
class Unavailable extends \RuntimeException implements Exception
{
}
