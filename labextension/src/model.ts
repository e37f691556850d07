import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { KPLApiError } from './request';

/**
 * A list fetched from the server and refreshed by a `Poll`, observed through `changed`.
 *
 * Each panel owns one: the panel renders on `changed`, the model never touches the DOM.
 */
export class PollingListModel<T> implements IDisposable {
  constructor(options: PollingListModel.IOptions<T>) {
    this._fetcher = options.fetcher;
    this._poll = new Poll({
      factory: () => this.fetch(),
      frequency: PollingListModel.frequency(options.interval),
      name: options.name,
      standby: options.standby ?? 'when-hidden',
      auto: false
    });
  }

  /**
   * Emitted after every fetch that changed the items or the error.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get items(): ReadonlyArray<T> {
    return this._items;
  }

  /**
   * Whether a first answer (items or error) has arrived.
   */
  get loaded(): boolean {
    return this._loaded;
  }

  /**
   * The error of the last fetch, or null when it succeeded.
   */
  get error(): KPLApiError | null {
    return this._error;
  }

  get filter(): string {
    return this._filter;
  }

  set filter(value: string) {
    if (value !== this._filter) {
      this._filter = value;
      void this.refresh();
    }
  }

  /**
   * Seconds between fetches.
   */
  set interval(seconds: number) {
    this._poll.frequency = PollingListModel.frequency(seconds);
    // A new frequency counts from the next tick: tick now so it starts at once.
    void this._poll.refresh();
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * Start polling.
   */
  start(): Promise<void> {
    return this._poll.start();
  }

  /**
   * Fetch the list now, whatever the poll's standby says.
   */
  async refresh(): Promise<void> {
    try {
      await this.fetch();
    } catch {
      // The error is the model's state (`error`), already announced.
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  /**
   * Fetch once; a failure is kept as `error` and rethrown so the poll backs off.
   */
  private async fetch(): Promise<void> {
    const generation = ++this._generation;
    let items = this._items;
    let error: KPLApiError | null = null;
    try {
      items = await this._fetcher(this._filter);
    } catch (reason) {
      error =
        reason instanceof KPLApiError
          ? reason
          : new KPLApiError(String(reason), 0);
    }
    // An older answer arriving after a newer one must not win.
    if (generation !== this._generation || this.isDisposed) {
      return;
    }
    const same =
      this._loaded &&
      JSON.stringify(items) === JSON.stringify(this._items) &&
      error?.message === this._error?.message;
    this._items = items;
    this._error = error;
    this._loaded = true;
    if (!same) {
      this._changed.emit();
    }
    if (error) {
      throw error;
    }
  }

  private _fetcher: (filter: string) => Promise<T[]>;
  private _poll: Poll;
  private _items: T[] = [];
  private _error: KPLApiError | null = null;
  private _filter = '';
  private _generation = 0;
  private _loaded = false;
  private _changed = new Signal<this, void>(this);
}

export namespace PollingListModel {
  export interface IOptions<T> {
    /**
     * Fetch the list for a filter (search text or state).
     */
    fetcher: (filter: string) => Promise<T[]>;
    /**
     * Seconds between fetches.
     */
    interval: number;
    /**
     * A name for the poll (debugging).
     */
    name?: string;
    /**
     * When to skip fetches, e.g. `() => !panel.isVisible || 'when-hidden'`.
     */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }

  /**
   * A poll frequency of `seconds` (0: never), backing off to a minute while the server fails.
   */
  export function frequency(seconds: number): IPoll.Frequency {
    if (seconds <= 0) {
      return { interval: Poll.NEVER, backoff: false, max: Poll.NEVER };
    }
    const interval = Math.max(0.5, seconds) * 1000;
    return { interval, backoff: true, max: Math.max(interval, 60_000) };
  }
}
