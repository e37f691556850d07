/**
 * Formatting shared by the panels and views.
 */

/**
 * A human size: 1.5 MB, 320 B.
 */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) {
    return '';
  }
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/**
 * A human duration: 1 h 02 min, 3 min 05 s, 12 s.
 */
export function formatSeconds(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '';
  }
  const s = Math.max(0, Math.round(seconds));
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s >= 3600) {
    return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} min`;
  }
  if (s >= 60) {
    return `${Math.floor(s / 60)} min ${pad(s % 60)} s`;
  }
  return `${s} s`;
}

/**
 * A short local date and time of an ISO timestamp.
 */
export function formatTime(iso: string | null | undefined): string {
  return iso ? new Date(iso).toLocaleString() : '';
}

/**
 * A distinct color for the i-th class or series.
 */
export function palette(index: number): string {
  const colors = [
    '#1f77b4',
    '#ff7f0e',
    '#2ca02c',
    '#d62728',
    '#9467bd',
    '#8c564b',
    '#e377c2',
    '#7f7f7f',
    '#bcbd22',
    '#17becf'
  ];
  return colors[((index % colors.length) + colors.length) % colors.length];
}

/**
 * A dataset name from an archive's file name: its stem with unsupported characters replaced.
 */
export function nameFromFile(fileName: string): string {
  const stem = fileName.replace(
    /\.(zip|tar|tar\.gz|tgz|tar\.bz2|tar\.xz)$/i,
    ''
  );
  const name = stem.replace(/[^\w.-]+/g, '-').replace(/^[^\w]+/, '');
  return name.slice(0, 100) || 'dataset';
}

/**
 * The usual splits in the order people read them; other parts follow by name.
 */
const SPLITS = [
  'root',
  'train',
  'training',
  'val',
  'valid',
  'validation',
  'dev',
  'test',
  'testing'
];

/**
 * Dataset parts in reading order: root, train, validation, test, then the others by name.
 */
export function partOrder(parts: string[]): string[] {
  const rank = (part: string) => {
    const index = SPLITS.indexOf(part.toLowerCase());
    return index < 0 ? SPLITS.length : index;
  };
  return [...parts].sort(
    (a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0)
  );
}

/**
 * A record's value as one table cell: bytes as their size (`{"$bytes": n}` from the API).
 */
export function formatCell(value: unknown): string {
  if (value === null || value === undefined) {
    return '∅';
  }
  if (typeof value === 'object' && '$bytes' in (value as object)) {
    return formatBytes((value as { $bytes: number }).$bytes);
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}
