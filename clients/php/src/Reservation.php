<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\Args;

/**
 * Units of a SKU reserved for a lease (Stock::reserve()). Not tied to the connection
 * that made it: another request can commit it by its id (Stock::reservation()).
 */
final class Reservation
{
    /**
     * @internal Stock makes it
     *
     * @param string   $id  32 hex characters: what commit() and cancel() need
     * @param int|null $qty the units reserved (null: a reservation known by its id only)
     */
    public function __construct(
        private Connection $conn,
        public readonly string $sku,
        public readonly string $id,
        public readonly ?int $qty,
    ) {
    }

    /**
     * The units are sold, for good: true (again on a repeated commit, which counts
     * nothing more), or false when the reservation was lost (canceled, or its lease ran
     * out and its units went back to the stock: sell them again with a new reserve).
     */
    public function commit(): bool
    {
        return Args::bool($this->conn->call(['STOCK', 'COMMIT', $this->sku, $this->id]), 'STOCK COMMIT');
    }

    /** The units go back to the stock: true, or false when it was lost or committed. */
    public function cancel(): bool
    {
        return Args::bool($this->conn->call(['STOCK', 'CANCEL', $this->sku, $this->id]), 'STOCK CANCEL');
    }

    /** Sets the lease to $leaseMs from now (a slow payment): true, or false when lost. */
    public function extend(int $leaseMs): bool
    {
        $args = ['STOCK', 'EXTEND', $this->sku, $this->id, Args::ttl($leaseMs, 'leaseMs')];
        return Args::bool($this->conn->call($args), 'STOCK EXTEND');
    }
}
