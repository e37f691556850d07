import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { KPLClient, Version } from './api';
import { KPLApiError } from './request';

/**
 * The versions of the extension and of the server (or why the server did not answer).
 */
function About(props: {
  frontendVersion: string;
  server: Version | KPLApiError;
}): JSX.Element {
  const { server } = props;
  return (
    <div className="kpl-About">
      <p>
        <strong>Extension version: </strong>
        <span className="kpl-About-frontendVersion">
          {props.frontendVersion}
        </span>
      </p>
      {server instanceof KPLApiError ? (
        <p>
          <strong>Server error: </strong>
          <span className="kpl-About-serverError">{server.message}</span>
        </p>
      ) : (
        <p>
          <strong>Server version: </strong>
          <span className="kpl-About-serverVersion">{server.version}</span>
        </p>
      )}
    </div>
  );
}

/**
 * Show the About dialog with the versions of the extension and the server.
 */
export async function showAbout(
  frontendVersion: string,
  client: KPLClient
): Promise<void> {
  let server: Version | KPLApiError;
  try {
    server = await client.GET('/version');
  } catch (error) {
    if (!(error instanceof KPLApiError)) {
      throw error;
    }
    server = error;
  }
  await showDialog({
    title: 'About KPL Lab',
    body: ReactWidget.create(
      <About frontendVersion={frontendVersion} server={server} />
    ),
    buttons: [Dialog.okButton()]
  });
}
