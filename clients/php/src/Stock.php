<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\Args;

/**
 * The stock of one SKU, sold through reservations with a lease: a buyer reserves units,
 * then commits them (sold, for good) or cancels them (back in stock); a reservation
 * nobody commits gives its units back when its lease ends, so a buyer that crashes
 * cannot take them out of the sale, and no unit is ever sold twice. At every instant
 * stock = sold + reserved + available.
 *
 * The state (status(), set(), add()) is an array of ints: `stock`, `available`,
 * `reserved`, `sold`, `reservations` (live ones), `waiters` (reserves waiting).
 */
final class Stock
{
    /** @internal Client::stock() makes it */
    public function __construct(private Connection $conn, public readonly string $sku)
    {
    }

    /**
     * Sets the stock to $qty units, sold and reserved ones included (a $qty below them
     * is refused with a CommandError and changes nothing). Returns the state.
     */
    public function set(int $qty): array
    {
        if ($qty < 0 || $qty > Args::QTY_MAX) {
            throw new InvalidArgument(sprintf('dlock: qty must be 0 to %d, not %d', Args::QTY_MAX, $qty));
        }
        return $this->state(['STOCK', 'SET', $this->sku, (string) $qty]);
    }

    /** Adds $delta units (negative: takes available ones away). Returns the state. */
    public function add(int $delta): array
    {
        if ($delta === 0 || $delta < -Args::QTY_MAX || $delta > Args::QTY_MAX) {
            throw new InvalidArgument(sprintf('dlock: delta must be nonzero, at most %d either way', Args::QTY_MAX));
        }
        return $this->state(['STOCK', 'ADD', $this->sku, (string) $delta]);
    }

    /** The SKU's state (a SKU never set reads as all zeros). */
    public function status(): array
    {
        return $this->state(['STOCK', 'STATUS', $this->sku]);
    }

    /**
     * Reserves $qty units, all or none, for a lease of $leaseMs: commit() them once paid
     * for, or cancel(). With $waitMs, waits (in arrival order, without polling) for
     * units a cancel, an expired lease or a restock frees.
     *
     * Throws OutOfStock when the units could not be had within the wait, saying whether
     * the SKU is sold out or its units are only reserved at the moment.
     */
    public function reserve(int $qty, int $leaseMs = Client::DEFAULT_TTL_MS, int $waitMs = 0): Reservation
    {
        $args = ['STOCK', 'RESERVE', $this->sku, Args::qty($qty), 'TTL', Args::ttl($leaseMs, 'leaseMs')];
        $wait = Args::wait($waitMs);
        if ($wait !== 0) {
            array_push($args, 'WAIT', (string) $wait);
        }
        $id = $this->conn->call($args, $wait);
        if (is_string($id)) {
            return new Reservation($this->conn, $this->sku, $id, $qty);
        }
        if ($id !== null) {
            throw new ProtocolError('dlockd: STOCK RESERVE replied ' . Args::show($id) . ', not an id or nil');
        }
        // Why, from the state now: dlockd refuses at once, without waiting, when more
        // units are asked than are not yet sold.
        $state = $this->status();
        $unsold = $state['stock'] - $state['sold'];
        if ($qty > $unsold) {
            throw new OutOfStock(sprintf(
                "dlock: SKU '%s' is sold out: %d unit(s) asked, %d of %d not sold",
                $this->sku,
                $qty,
                $unsold,
                $state['stock']
            ), true, $state);
        }
        throw new OutOfStock(sprintf(
            "dlock: SKU '%s': %d unit(s) asked, %d available, %d reserved by other buyers at the moment",
            $this->sku,
            $qty,
            $state['available'],
            $state['reserved']
        ), false, $state);
    }

    /** A reservation made elsewhere (another request), by its id: to commit or cancel it. */
    public function reservation(string $id): Reservation
    {
        if (preg_match('/^[0-9a-f]{32}$/', $id) !== 1) {
            throw new InvalidArgument('dlock: a reservation id is 32 lowercase hex characters');
        }
        return new Reservation($this->conn, $this->sku, $id, null);
    }

    private function state(array $args): array
    {
        $state = Args::map($this->conn->call($args), "STOCK {$args[1]}");
        foreach (['stock', 'available', 'reserved', 'sold', 'reservations', 'waiters'] as $field) {
            if (!is_int($state[$field] ?? null)) {
                throw new ProtocolError("dlockd: STOCK {$args[1]} replied without '$field'");
            }
        }
        return $state;
    }
}
