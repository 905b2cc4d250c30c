<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\PhpRedisConnection;
use Dlock\Internal\PredisConnection;
use Dlock\Internal\Acquire;
use Dlock\Internal\Acquires;
use Dlock\Internal\Args;
use Dlock\Internal\Observe;
use Dlock\Internal\Url;

/**
 * Locks, semaphores, leader election and stock from dlockd, over the Redis client the
 * application already has (phpredis's \Redis or a Predis\Client), connected to dlockd:
 *
 *     $dlock = new Dlock\Client($redis);
 *     $dlock->synchronized('order:42', function (Dlock\Lock $lock) { ... }, waitMs: 5000);
 *     $dlock->lead('scheduler', fn (int $term) => run_scheduler($term), value: '10.0.0.7:8080');
 *
 * Each method but observe() is one command, one round trip. Errors are this package's
 * exceptions whichever client is underneath; a lock not acquired within its wait is
 * null from lock() (NotAcquired from synchronized()), likewise elect() and lead().
 */
final class Client
{
    use Acquires;

    /** The package's version: the version of dlock it comes with. */
    public const VERSION = '0.1.0';
    /** A wait without end (dlockd's WAIT -1). */
    public const FOREVER = PHP_INT_MAX;
    /** The lease of a lock when no ttlMs is given, in ms. */
    public const DEFAULT_TTL_MS = 30000;

    private Connection $conn;
    /** The URL of connect(), for the connections observe() opens (TLS options and all). */
    private ?Url $url = null;

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
        $redis = $u->client === 'predis' ? $u->predis() : $u->phpredis();
        $client = new self($redis, $u->maxHoldMs, $u->name);
        if ($redis instanceof \Redis) {
            // Connected again from the URL after a failure, TLS options and all.
            $client->conn = new PhpRedisConnection($redis, $u);
        }
        $client->url = $u;
        return $client;
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
        $head = ['LOCK', Args::name($name)];
        return $this->acquireLock($name, $head, $ttlMs, $waitMs, $shared, $fair, $detached, $maxHoldMs, $label);
    }

    /**
     * Runs $fn holding the lock $name, releases it however $fn ends, and returns what
     * $fn returned. $fn gets the Lock (its fence, for the resource it protects).
     *
     * Throws NotAcquired when the lock was not acquired within the wait, LockLost when
     * the release found it no longer held ($fn's work was not wholly under the lock),
     * and whatever $fn throws. The other parameters are lock()'s, but for $detached:
     * the lock ends with $fn, so a session lock serves.
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

    /**
     * Campaigns to lead the election $name: a Leadership once this process leads, or
     * null when another kept leading through the wait.
     *
     * The leadership lives on this client's connection, as session locks do: dlockd
     * renews it while the connection is open and resigns it the moment the connection
     * closes (the next candidate then leads within milliseconds). It also ends with
     * Leadership::resign(), when the Leadership object is dropped, and at the end of the
     * request (the same shutdown guard as session locks, for persistent connections).
     *
     * @param string   $value  what the leader announces to everyone who asks (leader(),
     *                         observe()): its address, say; up to 1024 bytes
     * @param int      $ttlMs  the lease, renewed by dlockd while the connection lives:
     *                         only how long a dlockd that dies keeps the next leader
     *                         waiting (dlockd's floor is 1000 ms)
     * @param int|null $waitMs null (or Client::FOREVER): campaign until elected; 0: try
     *                         once; else up to this long (no polling: dlockd answers
     *                         when the leader goes)
     * @param bool     $fair   among the candidates, first come first served
     * @param string|null $label who leads, as operators see it (the client's default)
     */
    public function elect(
        string $name,
        string $value = '',
        int $ttlMs = self::DEFAULT_TTL_MS,
        ?int $waitMs = null,
        bool $fair = false,
        ?string $label = null,
    ): ?Leadership {
        $args = ['ELECT', Args::name($name, 'election name'), 'TTL', Args::ttl($ttlMs), 'VALUE', Args::value($value)];
        $wait = Args::wait($waitMs ?? self::FOREVER);
        if ($wait !== 0) {
            array_push($args, 'WAIT', (string) $wait);
        }
        if ($fair) {
            $args[] = 'FAIR';
        }
        $label ??= $this->label;
        if ($label !== null) {
            array_push($args, 'LABEL', Args::label($label));
        }
        $reply = $this->conn->call($args, $wait);
        if ($reply === null) {
            return null;
        }
        [$token, $term] = Acquire::grant($reply, 'ELECT');
        return new Leadership($this->conn, $name, $token, $term, $value);
    }

    /**
     * Campaigns to lead $name, runs $fn($term, $leadership) while leading, resigns
     * however $fn ends, and returns what $fn returned. Pass the term to what the leader
     * acts on: it is larger than every earlier leader's, so a resource that checks it
     * refuses a deposed leader.
     *
     *     $dlock->lead('scheduler', fn (int $term) => run_scheduler($term), value: '10.0.0.7:8080');
     *
     * Throws NotAcquired when not elected within $waitMs (null: campaign without end),
     * LockLost when the resignation found the leadership already gone (deposed, or its
     * connection closed) and $fn had not learned it itself (Leadership::isLeading(),
     * proclaim()), and whatever $fn throws. The other parameters are elect()'s.
     */
    public function lead(
        string $name,
        callable $fn,
        string $value = '',
        int $ttlMs = self::DEFAULT_TTL_MS,
        ?int $waitMs = null,
        bool $fair = false,
        ?string $label = null,
    ): mixed {
        $leadership = $this->elect($name, $value, $ttlMs, $waitMs, $fair, $label);
        if ($leadership === null) {
            throw new NotAcquired("dlock: not elected leader of '$name' within " . Acquire::waitText($waitMs));
        }
        try {
            $result = $fn($leadership->term(), $leadership);
        } catch (\Throwable $e) {
            try {
                $leadership->resign();
            } catch (\Throwable) {
                // $fn's exception is the one to report; the leadership goes with its session.
            }
            throw $e;
        }
        // A callable that resigned, or found itself deposed, ended its term knowingly.
        if (!$leadership->isOver() && !$leadership->resign()) {
            throw new LockLost(sprintf(
                "dlock: the leadership of '%s' (term %d) was lost before the callable returned",
                $name,
                $leadership->term()
            ));
        }
        return $result;
    }

    /**
     * Who leads the election $name now: `value` (what it announced), `holder` (who, as
     * operators see it), `term` and `remaining_ms` (its lease); null when no one leads.
     *
     * @return array{value: string, holder: string, term: int, remaining_ms: int}|null
     */
    public function leader(string $name): ?array
    {
        $reply = $this->conn->call(['LEADER', Args::name($name, 'election name')]);
        if ($reply === null) {
            return null;
        }
        if (!is_array($reply) || count($reply) !== 4 || !is_string($reply[0]) || !is_string($reply[1])
            || !is_int($reply[2]) || !is_int($reply[3])) {
            throw new ProtocolError('dlockd: LEADER replied ' . Args::show($reply) . ', not [value, holder, term, remaining_ms]');
        }
        return ['value' => $reply[0], 'holder' => $reply[1], 'term' => $reply[2], 'remaining_ms' => $reply[3]];
    }

    /**
     * Follows the election $name: calls $onChange($term, $value) with the state now, then
     * at each change (a new leader, a proclaimed value, no leader: term 0 and value
     * null), in term order, until $onChange returns false or $timeoutS seconds have
     * passed (null: no end). Returns then; throws what $onChange throws, Unavailable
     * when dlockd could not be reached or the connection broke.
     *
     * Redis pub/sub in PHP blocks: the process does nothing else meanwhile (a PHP-FPM
     * request included). It runs on a connection of its own (SUBSCRIBE leader:NAME),
     * opened for the call and closed after, not on this client's: a client that leads
     * or holds locks keeps them while it observes, and may be used from $onChange.
     */
    public function observe(string $name, callable $onChange, ?float $timeoutS = null): void
    {
        Args::name($name, 'election name');
        if ($timeoutS !== null && !($timeoutS > 0 && $timeoutS <= Args::MS_MAX / 1000)) {
            throw new InvalidArgument('dlock: timeoutS must be more than 0 seconds, or null (no end)');
        }
        $redis = $this->url !== null ? $this->url->subscriber() : $this->conn->subscriber();
        Observe::run($redis, "leader:$name", $onChange, $timeoutS);
    }
}
