<?php

declare(strict_types=1);

namespace Dlock;

/**
 * An argument out of range (an empty or over-long name, a negative wait, a TTL of 0),
 * refused before anything is sent.
 */
class InvalidArgument extends \InvalidArgumentException implements Exception
{
}
