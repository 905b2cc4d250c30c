// The package as installed: its version is dlock's, its metadata, what it exports, and
// the error classes' family. No server needed.
'use strict';

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..', '..');
const pkgDir = path.resolve(__dirname, '..');
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));

test("the package's version is include/dlock.h's DLOCK_VERSION_STRING", () => {
  const header = fs.readFileSync(path.join(root, 'include', 'dlock.h'), 'utf8');
  const m = /#define DLOCK_VERSION_STRING "([^"]+)"/.exec(header);
  assert.ok(m, 'DLOCK_VERSION_STRING not found in include/dlock.h');
  assert.equal(pkg.version, m[1]);
  assert.equal(require('..').VERSION, m[1]);
});

test('package.json: name, license, entry points, exact pins', () => {
  assert.equal(pkg.name, 'dlock');
  assert.equal(pkg.license, 'BSD-3-Clause');
  assert.equal(pkg.main, 'dist/index.js');
  assert.equal(pkg.types, 'dist/index.d.ts');
  assert.ok(Array.isArray(pkg.files) && pkg.files.some((f) => f.startsWith('dist')));
  assert.equal(pkg.dependencies.ioredis, '5.9.3');
  assert.equal(pkg.devDependencies.typescript, '5.9.3');
  assert.match(pkg.devDependencies['@types/node'], /^20\.\d+\.\d+$/);
  // The same ioredis as the service's own ioredis test pins.
  const other = require(path.join(root, 'tests', 'service', 'clients', 'node', 'package.json'));
  assert.equal(pkg.dependencies.ioredis, other.dependencies.ioredis);
  const lock = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package-lock.json'), 'utf8'));
  assert.equal(lock.packages['node_modules/ioredis'].version, '5.9.3');
  assert.equal(lock.packages['node_modules/typescript'].version, '5.9.3');
  assert.equal(require('ioredis/package.json').version, '5.9.3');
  const tsconfig = JSON.parse(fs.readFileSync(path.join(pkgDir, 'tsconfig.json'), 'utf8'));
  assert.equal(tsconfig.compilerOptions.strict, true);
  assert.ok(fs.existsSync(path.join(pkgDir, 'dist', 'index.d.ts')));
});

test('require from the repository root loads it', () => {
  const m = require(path.join(root, 'clients', 'node'));
  assert.equal(typeof m.Client, 'function');
  assert.equal(m, require('..'));
});

test('the error classes and their family', () => {
  const d = require('..');
  const names = [
    'NotAcquiredError', 'OutOfStockError', 'LockLostError', 'UnavailableError', 'NoQuorumError',
    'AuthFailedError', 'CommandError', 'ProtocolError', 'InvalidArgumentError',
  ];
  for (const n of names) {
    const e = n === 'OutOfStockError' ? new d[n]('m', true, {}) : new d[n]('m');
    assert.ok(e instanceof d.DlockError, n);
    assert.ok(e instanceof Error, n);
    assert.equal(e.name, n);
  }
  assert.ok(new d.NoQuorumError('m') instanceof d.UnavailableError);
  assert.ok(new d.OutOfStockError('m', false, {}) instanceof d.NotAcquiredError);
  assert.equal(d.FOREVER, Infinity);
  for (const n of ['Client', 'Lock', 'Semaphore', 'Stock', 'Reservation', 'Leadership', 'Observer']) assert.equal(typeof d[n], 'function', n);
});
