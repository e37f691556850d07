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
