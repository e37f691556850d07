import { chartData, tickLabels, wholeX, WHOLE_STEPS, yTitle } from '../charts';

describe('metric charts', () => {
  it('ticks whole numbers only when every x is whole (epochs, not 1.1, 1.2)', () => {
    const epochs = chartData({
      train_accuracy: [
        [1, 0.5],
        [2, 0.7],
        [3, 0.8]
      ],
      eval_accuracy: [
        [1, 0.4],
        [3, 0.75]
      ]
    });
    expect(wholeX(epochs.data)).toBe(true);
    expect(WHOLE_STEPS.every(Number.isInteger)).toBe(true);
    const fractions = chartData({
      loss: [
        [0.5, 1],
        [1, 0.8]
      ]
    });
    expect(wholeX(fractions.data)).toBe(false);
    expect(wholeX([[]])).toBe(false); // no points yet
  });

  it('labels ticks with the decimals their step needs, each tick its own', () => {
    expect(tickLabels([0.9975, 0.998, 0.9985], 0.0005)).toEqual([
      '0.9975',
      '0.9980',
      '0.9985'
    ]);
    expect(tickLabels([0, 0.25, 0.5], 0.25)).toEqual(['0.00', '0.25', '0.50']);
    expect(tickLabels([0, 1, 2], 1)).toEqual(['0', '1', '2']);
    expect(tickLabels([1000, 2000], 1000)).toEqual(['1000', '2000']);
    expect(tickLabels([null, 0.1], 0.1)).toEqual(['', '0.1']);
  });

  it("titles the y axis with the figure's one series name, else its title", () => {
    expect(yTitle('accuracy', ['train_accuracy', 'eval_accuracy'])).toBe(
      'accuracy'
    );
    expect(yTitle('loss', ['train_loss', ''])).toBe('train_loss');
    expect(yTitle('loss', [])).toBe('loss');
  });
});
