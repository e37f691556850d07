/**
 * How the dataset viewer labels predictions written by batch inference (`infer` jobs):
 * boxes with their class and score, and the class of a classified image.
 */

/**
 * The part of a detected object a label needs.
 */
export interface ILabelledObject {
  name?: string;
  score?: number;
}

function percent(score: number): string {
  return `${Math.round(score * 100)}%`;
}

/**
 * The label of a box: its class, and its score when it is a prediction.
 */
export function boxLabel(object: ILabelledObject): string {
  const name = object.name ?? '';
  if (typeof object.score !== 'number' || !Number.isFinite(object.score)) {
    return name;
  }
  return name ? `${name} ${percent(object.score)}` : percent(object.score);
}

/**
 * The predicted class of a classified image (`class_name` with a `score`), or null.
 *
 * A record with a class but no score is a labelled training image: its class is
 * already in the field table, so nothing is drawn over it.
 */
export function predictedClass(fields: Record<string, unknown>): string | null {
  const name = fields['class_name'];
  const score = fields['score'];
  if (typeof score !== 'number' || !Number.isFinite(score)) {
    return null;
  }
  if (typeof name === 'string' && name) {
    return `${name} ${percent(score)}`;
  }
  if (typeof fields['class_id'] === 'number') {
    return `${fields['class_id']} ${percent(score)}`;
  }
  return null;
}
