<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\AuthFailed;
use Dlock\InvalidArgument;
use Dlock\Unavailable;

/**
 * A dlockd URL (Client::connect()) and the phpredis or predis connection it names.
 *
 * @internal
 */
final class Url
{
    public const DEFAULT_PORT = 7379;
    /** The query's keys; any other is a typo the user would want to hear about. */
    private const OPTIONS = ['timeout', 'persistent', 'name', 'maxhold', 'cafile', 'cert', 'key', 'client'];

    /** @param array<string, string> $q the query, checked */
    private function __construct(
        public readonly string $scheme,
        public readonly string $host,
        public readonly int $port,
        public readonly ?string $user,
        public readonly ?string $password,
        private readonly array $q,
        public readonly float $timeout,
        public readonly bool $persistent,
        public readonly ?string $name,
        public readonly ?int $maxHoldMs,
        public readonly string $client,
    ) {
    }

    public static function parse(string $url): self
    {
        // parse_url() refuses scheme:///path for every scheme but file: parse it as that.
        $unix = str_starts_with($url, 'dlockd+unix:///');
        $p = parse_url($unix ? 'file' . substr($url, strlen('dlockd+unix')) : $url);
        $scheme = $unix ? 'dlockd+unix' : (is_array($p) ? ($p['scheme'] ?? '') : '');
        if (!is_array($p) || !in_array($scheme, ['dlockd', 'dlockds', 'dlockd+unix'], true)) {
            throw new InvalidArgument("dlock: '$url' is not a dlockd://, dlockds:// or dlockd+unix:///PATH URL");
        }
        $host = $unix ? ($p['path'] ?? '') : ($p['host'] ?? '');
        if ($host === '') {
            throw new InvalidArgument("dlock: '$url' names no " . ($unix ? 'socket path' : 'host'));
        }
        $port = $unix ? 0 : ($p['port'] ?? self::DEFAULT_PORT);
        if (!$unix && ($port < 1 || $port > 65535)) {
            throw new InvalidArgument("dlock: '$url': port must be 1 to 65535");
        }
        $user = isset($p['user']) && $p['user'] !== '' ? rawurldecode($p['user']) : null;
        if ($user !== null && $user !== 'default' && $user !== 'admin') {
            throw new InvalidArgument("dlock: dlockd's users are default and admin, not '$user'");
        }
        parse_str($p['query'] ?? '', $q);
        foreach ($q as $k => $v) {
            if (!in_array($k, self::OPTIONS, true)) {
                throw new InvalidArgument("dlock: unknown option '$k' in a dlockd URL (" . implode(', ', self::OPTIONS) . ')');
            }
            if (!is_string($v)) {
                throw new InvalidArgument("dlock: option '$k' of a dlockd URL given more than once or as an array");
            }
        }
        $timeout = $q['timeout'] ?? '5';
        if (!is_numeric($timeout) || (float) $timeout < 0.001 || (float) $timeout > 86400) {
            throw new InvalidArgument('dlock: timeout must be 0.001 to 86400 seconds');
        }
        $maxHold = $q['maxhold'] ?? null;
        if ($maxHold !== null && !ctype_digit($maxHold)) {
            throw new InvalidArgument('dlock: maxhold must be a number of ms (0: no limit)');
        }
        $client = $q['client'] ?? (extension_loaded('redis') ? 'phpredis' : 'predis');
        if ($client !== 'phpredis' && $client !== 'predis') {
            throw new InvalidArgument("dlock: client must be phpredis or predis, not '$client'");
        }
        $persistent = $q['persistent'] ?? '0';
        if (!in_array($persistent, ['0', '1', 'true', 'false'], true)) {
            throw new InvalidArgument('dlock: persistent must be 1 or 0');
        }
        return new self(
            $scheme,
            $host,
            (int) $port,
            $user,
            isset($p['pass']) ? rawurldecode($p['pass']) : null,
            $q,
            (float) $timeout,
            $persistent === '1' || $persistent === 'true',
            $q['name'] ?? null,
            $maxHold === null ? null : (int) $maxHold,
            $client
        );
    }

    /** @param bool|null $persistent null: as the URL says */
    public function phpredis(?bool $persistent = null): \Redis
    {
        if (!extension_loaded('redis')) {
            throw new InvalidArgument('dlock: the phpredis extension is not loaded (php-redis)');
        }
        $r = new \Redis();
        $this->connectPhpredis($r, $persistent);
        return $r;
    }

    /**
     * Connects $r (again) to the URL's dlockd, with its TLS options and password.
     *
     * @param bool|null $persistent null: as the URL says
     */
    public function connectPhpredis(\Redis $r, ?bool $persistent = null): void
    {
        $persistent ??= $this->persistent;
        // An IPv6 address without its URL brackets: phpredis adds its own.
        $host = $this->scheme === 'dlockd+unix' ? 'unix://' . $this->host : trim($this->host, '[]');
        if ($this->scheme === 'dlockds') {
            $host = 'tls://' . $host;
        }
        $tls = $this->tls();
        $context = $tls === [] ? [] : ['stream' => $tls];
        try {
            $ok = self::quietly(fn () => $persistent
                ? $r->pconnect($host, $this->port, $this->timeout, 'dlock', 0, $this->timeout, $context)
                : $r->connect($host, $this->port, $this->timeout, null, 0, $this->timeout, $context), $warning);
            if (!$ok) {
                throw new Unavailable("dlock: cannot connect to dlockd at {$this->where()}" . $warning);
            }
            if ($this->password !== null) {
                $auth = $this->user !== null ? [$this->user, $this->password] : $this->password;
                if (!$r->auth($auth)) {
                    throw new AuthFailed('dlockd: ' . ($r->getLastError() ?? 'AUTH refused'));
                }
            }
            // At each connect made here, but not at phpredis's own reconnects (after
            // dlockd closed an idle connection), which is why the name is also the
            // label of every lock (Client), where it matters most.
            if ($this->name !== null && $r->client('setname', $this->name) !== true) {
                throw Replies::error($r->getLastError() ?? 'ERR CLIENT SETNAME refused');
            }
        } catch (\RedisException $e) {
            throw self::failure($e->getMessage() . ($warning ?? ''), $e, $this->where());
        }
    }

    /** @param bool|null $persistent null: as the URL says */
    public function predis(?bool $persistent = null): \Predis\Client
    {
        if (!class_exists(\Predis\Client::class)) {
            throw new InvalidArgument(
                'dlock: predis is not loaded: composer require predis/predis, or with Debian\'s '
                . "php-predis, require '/usr/share/php/Predis/autoload.php' first"
            );
        }
        $params = [
            'scheme' => match ($this->scheme) {
                'dlockds' => 'tls',
                'dlockd+unix' => 'unix',
                default => 'tcp',
            },
            'timeout' => $this->timeout,
            'read_write_timeout' => $this->timeout,
            // predis keys persistent streams by address alone: two persistent clients
            // of one dlockd in one process share a connection (and its session locks).
            'persistent' => $persistent ?? $this->persistent,
        ];
        if ($this->scheme === 'dlockd+unix') {
            $params['path'] = $this->host;
        } else {
            $params['host'] = $this->host;
            $params['port'] = $this->port;
        }
        $tls = $this->tls();
        if ($tls !== []) {
            $params['ssl'] = $tls;
        }
        $client = new \Predis\Client(
            $params,
            $this->scheme === 'dlockds' && PredisStream::needed() ? ['connections' => ['tls' => PredisStream::class]] : []
        );
        // Sent again at every connect, as predis sends its own AUTH: predis 1.1 knows
        // no user names, so AUTH is one of these commands here.
        $node = $client->getConnection();
        assert($node instanceof \Predis\Connection\NodeConnectionInterface);
        if ($this->password !== null) {
            $node->addConnectCommand(new \Predis\Command\RawCommand(
                $this->user !== null ? ['AUTH', $this->user, $this->password] : ['AUTH', $this->password]
            ));
        }
        if ($this->name !== null) {
            $node->addConnectCommand(new \Predis\Command\RawCommand(['CLIENT', 'SETNAME', $this->name]));
        }
        try {
            self::quietly(fn () => $client->connect(), $warning);
        } catch (\Predis\CommunicationException $e) {
            $message = preg_replace('/^`[A-Z]+` failed: /', '', $e->getMessage());
            throw self::failure($message . ($warning ?? ''), $e, $this->where());
        }
        return $client;
    }

    /**
     * A connection of its own to the same dlockd, with the same client, TLS and
     * password, never persistent: for SUBSCRIBE (Client::observe()), which takes a
     * connection for itself and ends by closing it.
     */
    public function subscriber(): \Redis|\Predis\Client
    {
        return $this->client === 'predis' ? $this->predis(false) : $this->phpredis(false);
    }

    /** The TLS options of the query, as PHP's ssl stream context takes them. */
    private function tls(): array
    {
        $tls = [];
        foreach (['cafile' => 'cafile', 'cert' => 'local_cert', 'key' => 'local_pk'] as $option => $ssl) {
            if (isset($this->q[$option])) {
                $tls[$ssl] = $this->q[$option];
            }
        }
        return $tls;
    }

    /**
     * Runs $connect with PHP's warnings kept from the application, and returns what it
     * returned. A TLS handshake that fails warns ("certificate verify failed") before
     * the client reports it, and a framework that turns warnings into exceptions
     * (Laravel, PHPUnit) would throw that in place of this package's Unavailable.
     * $warning: the warnings' reasons, as text to end an exception's message with
     * ("" when none), also when $connect throws.
     */
    private static function quietly(callable $connect, ?string &$warning): mixed
    {
        $warning = '';
        $reasons = [];
        set_error_handler(static function (int $no, string $text) use (&$reasons, &$warning): bool {
            // "stream_socket_enable_crypto(): SSL operation failed with code 1. OpenSSL
            // Error messages:\nerror:0A000086:SSL routines::certificate verify failed"
            $reasons[] = preg_replace(['/^[\w:]+\(\): /', '/\s+/'], ['', ' '], $text);
            $warning = ' (' . implode('; ', $reasons) . ')';
            return true;
        }, E_WARNING | E_NOTICE);
        try {
            return $connect();
        } finally {
            restore_error_handler();
        }
    }

    private function where(): string
    {
        return $this->port === 0 ? $this->host : "{$this->host}:{$this->port}";
    }

    private static function failure(string $message, \Throwable $e, string $where): \Dlock\Exception
    {
        if (Replies::code($message) !== null) {
            return Replies::error($message);
        }
        return new Unavailable("dlock: cannot connect to dlockd at $where: $message", 0, $e);
    }
}
