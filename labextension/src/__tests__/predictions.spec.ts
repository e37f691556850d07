import { boxLabel, predictedClass } from '../predictions';

describe('prediction labels', () => {
  it('labels a predicted box with its class and score', () => {
    expect(boxLabel({ name: 'circle', score: 0.934 })).toBe('circle 93%');
    expect(boxLabel({ score: 0.5 })).toBe('50%');
  });

  it('labels an annotated box with its class only', () => {
    expect(boxLabel({ name: 'dog' })).toBe('dog');
    expect(boxLabel({})).toBe('');
    expect(boxLabel({ name: 'dog', score: NaN })).toBe('dog');
  });

  it('draws the class of a classified image only when it is a prediction', () => {
    expect(
      predictedClass({ class_name: 'seven', class_id: 7, score: 0.987 })
    ).toBe('seven 99%');
    expect(predictedClass({ class_id: 3, score: 0.25 })).toBe('3 25%');
    expect(predictedClass({ class_name: 'seven', class_id: 7 })).toBeNull();
    expect(predictedClass({ score: 0.5 })).toBeNull();
    expect(predictedClass({ class_name: 'x', score: '0.5' })).toBeNull();
  });
});
