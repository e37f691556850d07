import { NO_ALGORITHMS } from '../algorithms';
import { canStop } from '../api';
import { partOrder } from '../format';
import { scrollToEnd } from '../jobView';

describe('the job view', () => {
  it('offers Stop only while the job has not ended', () => {
    expect(canStop(null)).toBe(false);
    expect(canStop({ finished: null })).toBe(true);
    expect(canStop({ finished: '2026-11-26T05:00:00Z' })).toBe(false);
  });

  it('scrolls the followed log to its last line', () => {
    const log = { scrollTop: 0, scrollHeight: 900, clientHeight: 240 };
    scrollToEnd(log);
    expect(log.scrollTop).toBe(660);
    const short = { scrollTop: 0, scrollHeight: 100, clientHeight: 240 };
    scrollToEnd(short);
    expect(short.scrollTop).toBe(0);
  });
});

describe('first-run texts and defaults', () => {
  it('names the kpl-lab command in the empty Algorithms panel', () => {
    expect(NO_ALGORITHMS).toContain('`kpl-lab algorithm add');
    expect(NO_ALGORITHMS).not.toMatch(/`kpl`/);
  });

  it('opens the train part before test', () => {
    expect(partOrder(['test', 'train'])[0]).toBe('train');
    expect(partOrder(['zeta', 'test', 'root', 'val', 'alpha'])).toEqual([
      'root',
      'val',
      'test',
      'alpha',
      'zeta'
    ]);
  });
});
