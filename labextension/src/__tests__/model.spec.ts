import { PollingListModel } from '../model';
import { KPLApiError } from '../request';

describe('PollingListModel', () => {
  it('fetches with the filter and announces changes only', async () => {
    const filters: string[] = [];
    const model = new PollingListModel<string>({
      fetcher: async filter => {
        filters.push(filter);
        return filter ? [filter] : ['a', 'b'];
      },
      interval: 60
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    await model.refresh();
    expect(model.items).toEqual(['a', 'b']);
    expect(model.loaded).toBe(true);
    await model.refresh();
    expect(changes).toBe(1);
    model.filter = 'c';
    await model.refresh();
    expect(filters).toEqual(['', '', 'c', 'c']);
    expect(model.items).toEqual(['c']);
    expect(changes).toBe(2);
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });

  it('keeps the last items and the error when a fetch fails', async () => {
    let fail = false;
    const model = new PollingListModel<number>({
      fetcher: async () => {
        if (fail) {
          throw new KPLApiError('server gone', 0);
        }
        return [1];
      },
      interval: 60
    });
    await model.refresh();
    fail = true;
    await model.refresh();
    expect(model.items).toEqual([1]);
    expect(model.error?.message).toBe('server gone');
    fail = false;
    await model.refresh();
    expect(model.error).toBeNull();
    model.dispose();
  });

  it('lets an older answer lose against a newer one', async () => {
    const answers: ((items: string[]) => void)[] = [];
    const model = new PollingListModel<string>({
      fetcher: () => new Promise(resolve => answers.push(resolve)),
      interval: 60
    });
    const first = model.refresh();
    const second = model.refresh();
    answers[1](['new']);
    await second;
    answers[0](['old']);
    await first;
    expect(model.items).toEqual(['new']);
    model.dispose();
  });

  it('skips its fetches while in standby', async () => {
    let fetched = 0;
    const model = new PollingListModel<number>({
      fetcher: async () => {
        fetched++;
        return [];
      },
      interval: 0.5,
      standby: () => true
    });
    await model.start();
    await new Promise(resolve => setTimeout(resolve, 1200));
    expect(fetched).toBe(0);
    model.dispose();
  });

  it('never polls at interval 0', () => {
    expect(PollingListModel.frequency(0).interval).toBe(Infinity);
  });

  it('backs off to a minute at most while the server fails', () => {
    expect(PollingListModel.frequency(2)).toEqual({
      interval: 2000,
      backoff: true,
      max: 60000
    });
  });
});
