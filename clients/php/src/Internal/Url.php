<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\AuthFailed;
use Dlock\Connection\Replies;
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

    private function __construct(
        public readonly string $scheme,
        public readonly string $host,
        public readonly int $port,
        public readonly ?string $password,
        public readonly float $timeout,
        public readonly bool $persistent,
        public readonly ?string $name,
        public readonly ?int $maxHoldMs,
        public readonly ?string $cafile,
        public readonly string $client,
    ) {
    }

    public static function parse(string $url): self
    {
        // parse_url() refuses scheme:///path for every scheme but file: parse it as that.
        $unixPath = str_starts_with($url, 'dlockd+unix:///');
        $p = parse_url($unixPath ? 'file' . substr($url, strlen('dlockd+unix')) : $url);
        if ($unixPath && is_array($p)) {
            $p['scheme'] = 'dlockd+unix';
        }
        $scheme = is_array($p) ? ($p['scheme'] ?? '') : '';
        if (!in_array($scheme, ['dlockd', 'dlockds', 'dlockd+unix'], true)) {
            throw new InvalidArgument("dlock: '$url' is not a dlockd://, dlockds:// or dlockd+unix:// URL");
        }
        parse_str($p['query'] ?? '', $q);
        $unix = $scheme === 'dlockd+unix';
        $host = $unix ? ($p['path'] ?? '') : ($p['host'] ?? '');
        if ($host === '') {
            throw new InvalidArgument("dlock: '$url' names no " . ($unix ? 'socket path' : 'host'));
        }
        $timeout = (float) ($q['timeout'] ?? 5);
        if ($timeout <= 0) {
            throw new InvalidArgument('dlock: timeout must be a positive number of seconds');
        }
        $client = $q['client'] ?? (extension_loaded('redis') ? 'phpredis' : 'predis');
        if ($client !== 'phpredis' && $client !== 'predis') {
            throw new InvalidArgument("dlock: client must be phpredis or predis, not '$client'");
        }
        $maxHold = $q['maxhold'] ?? null;
        if ($maxHold !== null && (!is_string($maxHold) || !ctype_digit($maxHold))) {
            throw new InvalidArgument('dlock: maxhold must be a number of ms (0: no limit)');
        }
        return new self(
            $scheme,
            $host,
            $unix ? 0 : (int) ($p['port'] ?? self::DEFAULT_PORT),
            isset($p['pass']) ? rawurldecode($p['pass']) : null,
            $timeout,
            in_array($q['persistent'] ?? '0', ['1', 'true', 'yes'], true),
            $q['name'] ?? null,
            $maxHold === null ? null : (int) $maxHold,
            $q['cafile'] ?? null,
            $client
        );
    }

    public function phpredis(): \Redis
    {
        if (!extension_loaded('redis')) {
            throw new InvalidArgument('dlock: the phpredis extension is not loaded (php-redis)');
        }
        $r = new \Redis();
        $host = match ($this->scheme) {
            'dlockds' => 'tls://' . $this->host,
            'dlockd+unix' => 'unix://' . $this->host,
            // An IPv6 address without its URL brackets: phpredis adds its own.
            default => trim($this->host, '[]'),
        };
        $context = $this->cafile !== null ? ['stream' => ['cafile' => $this->cafile]] : [];
        try {
            $ok = $this->persistent
                ? $r->pconnect($host, $this->port, $this->timeout, 'dlock', 0, $this->timeout, $context)
                : $r->connect($host, $this->port, $this->timeout, null, 0, $this->timeout, $context);
            if (!$ok) {
                throw new Unavailable("dlock: cannot connect to dlockd at {$this->where()}");
            }
            if ($this->password !== null && !$r->auth($this->password)) {
                throw new AuthFailed('dlockd: ' . ($r->getLastError() ?? 'AUTH refused'));
            }
            if ($this->name !== null && $r->client('setname', $this->name) !== true) {
                throw Replies::error($r->getLastError() ?? 'ERR CLIENT SETNAME refused');
            }
        } catch (\RedisException $e) {
            throw self::failure($e->getMessage(), $e, $this->where());
        }
        return $r;
    }

    public function predis(): \Predis\Client
    {
        if (!class_exists(\Predis\Client::class)) {
            throw new InvalidArgument('dlock: predis is not installed (php-predis, or composer require predis/predis)');
        }
        $params = [
            'scheme' => match ($this->scheme) {
                'dlockds' => 'tls',
                'dlockd+unix' => 'unix',
                default => 'tcp',
            },
            'timeout' => $this->timeout,
            'read_write_timeout' => $this->timeout,
            'persistent' => $this->persistent,
        ];
        if ($this->scheme === 'dlockd+unix') {
            $params['path'] = $this->host;
        } else {
            $params['host'] = $this->host;
            $params['port'] = $this->port;
        }
        if ($this->password !== null) {
            $params['password'] = $this->password;
        }
        if ($this->cafile !== null) {
            $params['ssl'] = ['cafile' => $this->cafile];
        }
        $client = new \Predis\Client($params);
        try {
            $client->connect();
            if ($this->name !== null) {
                $reply = $client->executeRaw(['CLIENT', 'SETNAME', $this->name], $error);
                if ($error) {
                    throw Replies::error((string) $reply);
                }
            }
        } catch (\Predis\CommunicationException $e) {
            throw self::failure(preg_replace('/^`[A-Z]+` failed: /', '', $e->getMessage()), $e, $this->where());
        }
        return $client;
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
