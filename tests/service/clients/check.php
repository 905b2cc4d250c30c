<?php
// The phpredis scripts' assertion: check(COND, WHAT) fails the script (exit 1) with
// WHAT, after the name the script defines as CHECK_SCRIPT ("phpredis tls").
function check($cond, $what)
{
    if (!$cond) {
        fwrite(STDERR, CHECK_SCRIPT . ": FAILED: $what\n");
        exit(1);
    }
}
