<?php

declare(strict_types=1);

namespace Dlock;

/**
 * dlockd runs over several lock servers (Redlock) and too few answered to decide.
 * An Unavailable: catching that catches this too.
 */
class NoQuorum extends Unavailable
{
}
