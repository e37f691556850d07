import { LabIcon } from '@jupyterlab/ui-components';

const KPL_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="2" y="2" width="5" height="20" rx="1"/>
    <path d="M9 12 L18 2 H22 L13 12 L22 22 H18 Z"/>
  </g>
</svg>`;

/**
 * The KPL Lab logo, themed like JupyterLab's own icons.
 */
export const kplIcon = new LabIcon({ name: 'kpl-lab:logo', svgstr: KPL_SVG });

const DATASETS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <ellipse cx="12" cy="5" rx="8" ry="3"/>
    <path d="M4 7.5v4c0 1.7 3.6 3 8 3s8-1.3 8-3v-4c0 1.7-3.6 3-8 3s-8-1.3-8-3z"/>
    <path d="M4 14v4.5c0 1.7 3.6 3 8 3s8-1.3 8-3V14c0 1.7-3.6 3-8 3s-8-1.3-8-3z"/>
  </g>
</svg>`;

const ALGORITHMS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <circle cx="5" cy="6" r="3"/><circle cx="5" cy="18" r="3"/><circle cx="19" cy="12" r="3"/>
    <path d="M7.5 7.2l9 3.6-.7 1.8-9-3.6zM6.8 16.8l9-3.6.7 1.8-9 3.6z"/>
  </g>
</svg>`;

const JOBS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M3 3h2v16h16v2H3z"/>
    <path d="M6 16l4.5-6 3.5 3 5-7 1.6 1.2-6.3 8.8-3.5-3-3.2 4.2z"/>
  </g>
</svg>`;

export const datasetsIcon = new LabIcon({
  name: 'kpl-lab:datasets',
  svgstr: DATASETS_SVG
});

export const algorithmsIcon = new LabIcon({
  name: 'kpl-lab:algorithms',
  svgstr: ALGORITHMS_SVG
});

export const jobsIcon = new LabIcon({ name: 'kpl-lab:jobs', svgstr: JOBS_SVG });

const PIPELINES_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="2" y="4" width="6" height="5" rx="1"/><rect x="16" y="4" width="6" height="5" rx="1"/>
    <rect x="9" y="15" width="6" height="5" rx="1"/>
    <path d="M8 6h8v1.5H8zM18.3 9h1.5v3.8H12.8V15h-1.5v-3.7h7z"/>
  </g>
</svg>`;

export const pipelinesIcon = new LabIcon({
  name: 'kpl-lab:pipelines',
  svgstr: PIPELINES_SVG
});

const EXPERIMENTS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 2h6v2h-1v5.2l5.6 9.7A2 2 0 0 1 17.9 22H6.1a2 2 0 0 1-1.7-3.1L10 9.2V4H9z"/>
  </g>
</svg>`;

export const experimentsIcon = new LabIcon({
  name: 'kpl-lab:experiments',
  svgstr: EXPERIMENTS_SVG
});

const SERVICES_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="3" y="3" width="18" height="6" rx="1"/>
    <rect x="3" y="15" width="18" height="6" rx="1"/>
    <path d="M11 9h2v6h-2z"/>
  </g>
</svg>`;

export const servicesIcon = new LabIcon({
  name: 'kpl-lab:services',
  svgstr: SERVICES_SVG
});

const MODELS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 2 21 7v10l-9 5-9-5V7zm0 2.3L5.1 8.1 12 12l6.9-3.9zM5 9.8v6l6 3.4v-6zm8 9.4 6-3.4v-6l-6 3.4z"/>
  </g>
</svg>`;

export const modelsIcon = new LabIcon({
  name: 'kpl-lab:models',
  svgstr: MODELS_SVG
});
