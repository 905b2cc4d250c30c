<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\PhpRedisConnection;
use Dlock\Internal\PredisConnection;
use Dlock\Internal\Acquire;
use Dlock\Internal\Args;
use Dlock\Internal\Url;

/**
 * Locks, semaphores and stock from dlockd, over the Redis client the application
 * already has (phpredis's \Redis or a Predis\Client), connected to dlockd:
 *
 *     $dlock = new Dlock\Client($redis);
 *     $dlock->synchronized('order:42', function (Dlock\Lock $lock) { ... }, waitMs: 5000);
 *
 * Each method is one command, one round trip. Errors are this package's exceptions
 * whichever client is underneath; a lock not acquired within its wait is null from
 * lock() (NotAcquired from synchronized()).
 */
final class Client
{
    /** The package's version: the version of dlock it comes with. */
    public const VERSION = '0.1.0';
    /** A wait without end (dlockd's WAIT -1). */
    public const FOREVER = PHP_INT_MAX;
    /** The lease of a lock when no ttlMs is given, in ms. */
    public const DEFAULT_TTL_MS = 30000;

    private Connection $conn;

    /**
     * @param \Redis|\Predis\Client $redis     connected (or to be connected, for predis)
     *                                        to dlockd, and authenticated
     * @param int|null             $maxHoldMs the default MAXHOLD of session locks: dlockd
     *                                        releases one held longer (and closes its
     *                                        connection) however often renewed; null:
     *                                        dlockd's --max-hold
     * @param string|null          $label     the default label of this client's locks:
     *                                        who holds them, as operators see it
     *                                        (LOCKS, LOCKINFO, `dlock list`)
     */
    public function __construct(object $redis, private ?int $maxHoldMs = null, private ?string $label = null)
    {
        if ($maxHoldMs !== null) {
            Args::ms($maxHoldMs, 'maxHoldMs');
        }
        if ($label !== null) {
            Args::label($label);
        }
        if ($redis instanceof \Redis) {
            $this->conn = new PhpRedisConnection($redis);
        } elseif ($redis instanceof \Predis\Client) {
            $this->conn = new PredisConnection($redis);
        } else {
            throw new InvalidArgument(
                'dlock: Client takes a phpredis \Redis or a Predis\Client, not ' . get_class($redis)
            );
        }
    }

    /**
     * A client connected by URL:
     * `dlockd://[:PASSWORD@]HOST[:PORT][?OPTIONS]` (port 7379 by default),
     * `dlockds://...` over TLS, or `dlockd+unix:///PATH[?OPTIONS]`. OPTIONS:
     * `timeout` (connect and reply timeout in seconds, default 5), `persistent=1`
     * (a PHP-FPM worker's connection kept across requests), `name` (the connection's
     * name, CLIENT SETNAME, and the default label of its locks: who holds them, to
     * operators), `maxhold` (ms, as the constructor's), `cafile`, `cert` and `key`
     * (dlockds: the CA that signed dlockd's certificate, and this client's certificate
     * and key), `client=phpredis` or `predis` (default: phpredis when the extension is
     * loaded). The user in `dlockd://USER:PASSWORD@...` is `default` (the same as none)
     * or `admin`.
     *
     * Throws Unavailable when dlockd cannot be reached, AuthFailed when it refuses the
     * password, CommandError when it refuses the name, InvalidArgument for a URL it
     * does not take.
     */
    public static function connect(string $url): self
    {
        $u = Url::parse($url);
        return new self(
            $u->client === 'predis' ? $u->predis() : $u->phpredis(),
            $u->maxHoldMs,
            $u->name
        );
    }

    /**
     * Takes the lock $name: a Lock, or null when another holder kept it through the wait.
     *
     * @param int  $ttlMs     the lease: how long the lock lasts if nobody renews or
     *                        releases it. A session lock (the default) is renewed by
     *                        dlockd while this connection lives; dlockd's floor for one is
     *                        1000 ms
     * @param int  $waitMs    0: try once; else wait up to this long for the holder to
     *                        release it (no polling: dlockd answers when it does);
     *                        Client::FOREVER: without end
     * @param bool $shared    a shared (read) lock: held by many at once, none exclusive
     * @param bool $fair      among waiters of the name, first come first served
     * @param bool $detached  a plain lease, not renewed, that outlives the connection
     * @param int|null $maxHoldMs  a session lock held this long is released however
     *                        often renewed (null: the client's default)
     * @param string|null $label   who holds it, as operators see it (LOCKS, LOCKINFO)
     */
    public function lock(
        string $name,
        int $ttlMs = self::DEFAULT_TTL_MS,
        int $waitMs = 0,
        bool $shared = false,
        bool $fair = false,
        bool $detached = false,
        ?int $maxHoldMs = null,
        ?string $label = null,
    ): ?Lock {
        return Acquire::lock(
            $this->conn,
            $name,
            ['LOCK', Args::name($name)],
            $ttlMs,
            $waitMs,
            $shared,
            $fair,
            $detached,
            $maxHoldMs ?? ($detached ? null : $this->maxHoldMs),
            $label ?? $this->label
        );
    }

    /**
     * Runs $fn holding the lock $name, releases it however $fn ends, and returns what
     * $fn returned. $fn gets the Lock (its fence, for the resource it protects).
     *
     * Throws NotAcquired when the lock was not acquired within the wait, LockLost when
     * the release found it no longer held ($fn's work was not wholly under the lock),
     * and whatever $fn throws. The other parameters are lock()'s.
     */
    public function synchronized(
        string $name,
        callable $fn,
        int $ttlMs = self::DEFAULT_TTL_MS,
        int $waitMs = 0,
        bool $shared = false,
        bool $fair = false,
        ?int $maxHoldMs = null,
        ?string $label = null,
    ): mixed {
        $lock = $this->lock($name, $ttlMs, $waitMs, $shared, $fair, false, $maxHoldMs, $label);
        if ($lock === null) {
            throw new NotAcquired("dlock: lock '$name' not acquired within " . Acquire::waitText($waitMs));
        }
        return Acquire::holding($lock, $fn, "lock '$name'");
    }

    /** The semaphore $name of $permits permits (every user of a name passes the same). */
    public function semaphore(string $name, int $permits): Semaphore
    {
        return new Semaphore($this->conn, Args::name($name, 'semaphore name'), $permits, $this->maxHoldMs, $this->label);
    }

    /** The stock of the SKU $sku, sold through reservations with a lease. */
    public function stock(string $sku): Stock
    {
        return new Stock($this->conn, Args::name($sku, 'SKU'));
    }

    /**
     * What dlockd knows of the lock $name: `state` ("held" or "free"), `holder` (who:
     * a string; for shared holders a list of them, the longest lease first; null when
     * free), `remaining_ms`, `fence` (the last one issued), and `shared` (how many
     * shared holders, when there are).
     */
    public function info(string $name): array
    {
        $info = Args::map($this->conn->call(['LOCKINFO', Args::name($name)]), 'LOCKINFO');
        foreach (['state', 'holder', 'remaining_ms', 'fence'] as $field) {
            if (!array_key_exists($field, $info)) {
                throw new ProtocolError("dlockd: LOCKINFO replied without '$field'");
            }
        }
        return $info;
    }

    /**
     * A detached lock taken elsewhere (another request, another process), by its name
     * and token: to release, extend or check it here. $fence: the one its grant gave,
     * if the caller kept it (0: unknown).
     */
    public function adopt(string $name, string $token, int $fence = 0): Lock
    {
        if (preg_match('/^[0-9a-f]{32}$/', $token) !== 1) {
            throw new InvalidArgument('dlock: a token is 32 lowercase hex characters');
        }
        return new Lock($this->conn, Args::name($name), $token, $fence, 0, true);
    }
}
