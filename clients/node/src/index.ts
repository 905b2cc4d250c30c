// dlock: locks, semaphores, flash-sale stock and leader election from dlockd, the dlock
// lock service, over ioredis.
//
//   const { Client } = require('dlock');
//   const client = new Client(new Redis({ port: 7379 }));
//   await client.using('order:42', { ttl: 10000, wait: 5000 }, async (signal, lock) => { ... });
//   await client.lead('scheduler', { value: 'host-a:8080' }, async (signal, term) => { ... });

/** The package's version: the version of dlock it comes with (include/dlock.h). */
export const VERSION = '0.1.0';

export { Client, ClientOptions, DEFAULT_TIMEOUT } from './client';
export { Routine } from './acquire';
export { Lock } from './lock';
export { Leadership, LeadRoutine } from './elect';
export { Observer, ObserveOptions, ObserverEvents } from './observe';
export { Semaphore, SemaphoreOptions, Stock, Reservation, ReserveOptions } from './prims';
export { AcquireOptions, ElectOptions, LeaderInfo, LeaderChange, LockInfo, Name, FOREVER, DEFAULT_TTL } from './args';
export {
  DlockError,
  NotAcquiredError,
  OutOfStockError,
  LockLostError,
  UnavailableError,
  NoQuorumError,
  AuthFailedError,
  CommandError,
  ProtocolError,
  InvalidArgumentError,
  StockState,
} from './errors';
