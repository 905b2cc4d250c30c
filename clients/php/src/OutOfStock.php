<?php

declare(strict_types=1);

namespace Dlock;

/**
 * Stock::reserve() could not have the units within its wait, and why: $soldOut says
 * whether they are gone for good (more units asked than are not yet sold: no cancel or
 * expiry can give them back) or only reserved by other buyers at the moment (a cancel,
 * an expired lease or a restock may free them: try again later). $state is the SKU's
 * state when the reserve was refused (Stock::status()).
 */
final class OutOfStock extends NotAcquired
{
    /** @param array<string, int> $state */
    public function __construct(
        string $message,
        public readonly bool $soldOut,
        public readonly array $state,
    ) {
        parent::__construct($message);
    }
}
