/**
 * Waiting on the event loop without hanging: a lock whose waiters give up after a time, a
 * wake-up signal for the background refiller, and sleeps that all end at close.
 *
 * @module
 */

/** One holder at a time; a waiter that is not let in within its time gets `false`. */
export class Lock {
  private held = false;
  private readonly waiters: Array<(granted: boolean) => void> = [];

  /** True once held (call {@link Lock.release}); false after `timeoutMs`, or at {@link Lock.abort}. */
  acquire(timeoutMs: number): Promise<boolean> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) {
            this.waiters.splice(i, 1);
          }
          resolve(false);
        },
        Math.max(0, timeoutMs),
      );
      const waiter = (granted: boolean): void => {
        clearTimeout(timer);
        resolve(granted);
      };
      this.waiters.push(waiter);
    });
  }

  /** Lets the next waiter in, or frees the lock. */
  release(): void {
    const next = this.waiters.shift();
    if (next === undefined) {
      this.held = false;
    } else {
      next(true);
    }
  }

  /** Sends every waiter away with `false` (at close). */
  abort(): void {
    for (const waiter of this.waiters.splice(0)) {
      waiter(false);
    }
  }
}

/**
 * Wakes the refiller: a wake-up with nobody waiting is kept for the next wait (as tokio's
 * `Notify` keeps a permit). It holds no reference to the client, so a client dropped without
 * `close()` can still be collected while the refiller waits.
 */
export class Waker {
  private permit = false;
  private waiting: ((woken: boolean) => void) | undefined;

  /** Wakes the waiter, or leaves a permit. */
  wake(): void {
    const waiting = this.waiting;
    if (waiting === undefined) {
      this.permit = true;
    } else {
      this.waiting = undefined;
      waiting(true);
    }
  }

  /**
   * True when woken (or a permit was there), false after `tickMs`. The timer does not keep the
   * process alive: an idle client never holds a program open.
   */
  wait(tickMs: number): Promise<boolean> {
    if (this.permit) {
      this.permit = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting = undefined;
        resolve(false);
      }, tickMs);
      timer.unref();
      this.waiting = (woken: boolean): void => {
        clearTimeout(timer);
        resolve(woken);
      };
    });
  }
}

/** Sleeps that {@link Sleeps.wakeAll} ends early (at close). */
export class Sleeps {
  private readonly sleeping = new Set<() => void>();

  /** Resolves after `ms`, or at {@link Sleeps.wakeAll}. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.sleeping.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.sleeping.add(done);
    });
  }

  /** Ends every sleep now. */
  wakeAll(): void {
    for (const done of [...this.sleeping]) {
      done();
    }
  }
}
