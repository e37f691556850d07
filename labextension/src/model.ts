import { ISignal, Signal } from '@lumino/signaling';

import { ServerError } from './request';

/**
 * A list fetched from the server and refreshed on an interval, observed through signals.
 *
 * Each panel owns one: the panel renders on `changed`, the model never touches the DOM.
 */
export class PollingListModel<T> {
  constructor(
    private readonly fetcher: (filter: string) => Promise<T[]>,
    intervalSeconds: number
  ) {
    this._interval = intervalSeconds;
  }

  /**
   * Emitted after every refresh that changed the items or the error.
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get items(): ReadonlyArray<T> {
    return this._items;
  }

  /**
   * The error of the last refresh, or null when it succeeded.
   */
  get error(): ServerError | null {
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
   * Seconds between refreshes; 0 stops polling.
   */
  set interval(seconds: number) {
    this._interval = seconds;
    if (this._timer !== null) {
      this.start();
    }
  }

  /**
   * Fetch the list now.
   */
  async refresh(): Promise<void> {
    const generation = ++this._generation;
    let items = this._items;
    let error: ServerError | null = null;
    try {
      items = await this.fetcher(this._filter);
    } catch (reason) {
      error =
        reason instanceof ServerError
          ? reason
          : new ServerError(String(reason), 0);
    }
    // An older answer arriving after a newer one must not win.
    if (generation !== this._generation || this._disposed) {
      return;
    }
    const same =
      JSON.stringify(items) === JSON.stringify(this._items) &&
      error?.message === this._error?.message;
    this._items = items;
    this._error = error;
    if (!same || !this._loaded) {
      this._loaded = true;
      this._changed.emit();
    }
  }

  /**
   * Refresh now and then every `interval` seconds.
   */
  start(): void {
    this.stop();
    void this.refresh();
    if (this._interval > 0) {
      this._timer = window.setInterval(
        () => void this.refresh(),
        this._interval * 1000
      );
    }
  }

  stop(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }

  dispose(): void {
    this._disposed = true;
    this.stop();
    Signal.clearData(this);
  }

  private _items: T[] = [];
  private _error: ServerError | null = null;
  private _filter = '';
  private _interval: number;
  private _timer: number | null = null;
  private _generation = 0;
  private _loaded = false;
  private _disposed = false;
  private _changed = new Signal<this, void>(this);
}
