/**
 * What the deployment and model browser tests share: the detection example's files, trained through the
 * REST API as a user's CLI would, and small request helpers.
 */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';

// The VOC dataset, the detection example and the probe image, written once per worker by make_detection.py.
const FILES = mkdtempSync(path.join(tmpdir(), 'kpl-ui-detection-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_detection.py'),
  FILES
]);

export const file = (name: string): string => path.join(FILES, name);

export const unique = (prefix: string): string =>
  `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;

export async function getJSON(
  page: IJupyterLabPageFixture,
  url: string
): Promise<any> {
  const response = await page.request.get(url);
  expect(response.status(), await response.text()).toBe(200);
  return response.json();
}

/**
 * Upload the VOC dataset and the detection example, and train it twice (seeds 0 and 1): two versions of one model.
 */
export async function trainDetector(
  page: IJupyterLabPageFixture
): Promise<{ dataset: any; jobId: string; ref: string; canary: string }> {
  const dataset = unique('voc-shapes');
  const algorithm = unique('detection');
  const uploads: [string, string][] = [
    [
      `/kpl/api/datasets?name=${dataset}&format=voc&filename=detection-voc.zip`,
      'detection-voc.zip'
    ],
    [
      `/kpl/api/algorithms?name=${algorithm}&filename=detection-algorithm.zip`,
      'detection-algorithm.zip'
    ]
  ];
  const answers = [];
  for (const [url, name] of uploads) {
    const response = await page.request.post(url, {
      data: readFileSync(file(name)),
      headers: { 'Content-Type': 'application/zip' }
    });
    expect(response.status(), await response.text()).toBe(201);
    answers.push(await response.json());
  }
  const [part] = Object.keys(answers[0].parts);
  const jobIds: string[] = [];
  for (const seed of [0, 1]) {
    const submitted = await page.request.post('/kpl/api/jobs', {
      data: {
        algorithm,
        function: 'train',
        inputs: { data: `dataset:${dataset}` },
        parameters: { train_part: part, eval_part: part, seed }
      }
    });
    expect(submitted.status(), await submitted.text()).toBe(201);
    jobIds.push((await submitted.json()).id);
  }
  const refs: string[] = [];
  for (const jobId of jobIds) {
    await expect
      .poll(async () => (await getJSON(page, `/kpl/api/jobs/${jobId}`)).state, {
        timeout: 240_000,
        intervals: [2000]
      })
      .toBe('succeeded');
    const job = await getJSON(page, `/kpl/api/jobs/${jobId}`);
    refs.push(job.outputs.model.registered.replace(/^model:/, ''));
  }
  return {
    dataset: answers[0],
    jobId: jobIds[0],
    ref: refs[0],
    canary: refs[1]
  };
}
