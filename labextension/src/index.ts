import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';

import { showAbout } from './about';
import { kplIcon } from './icons';

// The bundler resolves this at build time; an `import` would put package.json outside rootDir.
declare const require: (path: string) => { version: string };
const frontendVersion = require('../package.json').version;

/**
 * The command ids of KPL Lab.
 */
export namespace CommandIDs {
  export const about = 'kpl-lab:about';
}

/**
 * The category of KPL Lab in the palette and the launcher.
 */
const CATEGORY = 'KPL Lab';

/**
 * Register the KPL Lab commands, palette items and launcher entries.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'kpl-lab:plugin',
  description: 'KPL Lab: a one-stop AI development workbench inside JupyterLab',
  autoStart: true,
  optional: [ICommandPalette, ILauncher],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    launcher: ILauncher | null
  ) => {
    app.commands.addCommand(CommandIDs.about, {
      label: 'About KPL Lab',
      caption: 'Show the versions of the KPL Lab extension and server',
      icon: kplIcon,
      execute: () =>
        showAbout(frontendVersion, app.serviceManager.serverSettings)
    });
    palette?.addItem({ command: CommandIDs.about, category: CATEGORY });
    launcher?.add({ command: CommandIDs.about, category: CATEGORY, rank: 100 });
  }
};

export default plugin;
