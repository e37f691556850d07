import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { requestAPI, ServerError } from './request';

/**
 * The answer of `GET /kpl/api/version`.
 */
export interface IVersionInfo {
  name: string;
  version: string;
}

/**
 * Build the body of the About dialog from the server's answer or error.
 */
function aboutBody(
  frontendVersion: string,
  server: IVersionInfo | ServerError
): Widget {
  const body = document.createElement('div');
  body.className = 'kpl-About';
  const rows: [string, string, string][] = [
    ['Extension version', frontendVersion, 'kpl-About-frontendVersion'],
    server instanceof ServerError
      ? ['Server error', server.message, 'kpl-About-serverError']
      : ['Server version', server.version, 'kpl-About-serverVersion']
  ];
  for (const [label, value, className] of rows) {
    const row = document.createElement('p');
    const name = document.createElement('strong');
    name.textContent = `${label}: `;
    const text = document.createElement('span');
    text.className = className;
    text.textContent = value;
    row.append(name, text);
    body.appendChild(row);
  }
  return new Widget({ node: body });
}

/**
 * Show the About dialog with the versions of the extension and the server.
 */
export async function showAbout(
  frontendVersion: string,
  settings: ServerConnection.ISettings
): Promise<void> {
  let server: IVersionInfo | ServerError;
  try {
    server = await requestAPI<IVersionInfo>('version', {}, settings);
  } catch (error) {
    if (!(error instanceof ServerError)) {
      throw error;
    }
    server = error;
  }
  await showDialog({
    title: 'About KPL Lab',
    body: aboutBody(frontendVersion, server),
    buttons: [Dialog.okButton()]
  });
}
