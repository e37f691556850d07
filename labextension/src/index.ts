import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Widget } from '@lumino/widgets';

import { showAbout } from './about';
import { AlgorithmsPanel } from './algorithms';
import {
  AlgorithmsAPI,
  DatasetsAPI,
  IAlgorithm,
  IDataset,
  IJob,
  JobsAPI,
  JobState
} from './api';
import { DatasetsPanel } from './datasets';
import { DatasetViewer } from './datasetViewer';
import { algorithmsIcon, datasetsIcon, jobsIcon, kplIcon } from './icons';
import { JobsPanel } from './jobs';
import { JobView } from './jobView';
import { PollingListModel } from './model';
import { SubmitJobForm } from './submitForm';

// The bundler resolves this at build time; an `import` would put package.json outside rootDir.
declare const require: (path: string) => { version: string };
const frontendVersion = require('../package.json').version;

/**
 * The command ids of KPL Lab.
 */
export namespace CommandIDs {
  export const about = 'kpl-lab:about';
  export const openDatasets = 'kpl-lab:open-datasets';
  export const openAlgorithms = 'kpl-lab:open-algorithms';
  export const openJobs = 'kpl-lab:open-jobs';
  export const uploadDataset = 'kpl-lab:upload-dataset';
  export const openDataset = 'kpl-lab:open-dataset';
  export const submitJob = 'kpl-lab:submit-job';
  export const openJob = 'kpl-lab:open-job';
}

/**
 * The category of KPL Lab in the palette and the launcher.
 */
const CATEGORY = 'KPL Lab';

const PLUGIN_ID = 'kpl-lab:plugin';

/**
 * Settings of the panels (schema/plugin.json).
 */
interface ISettings {
  refreshInterval: number;
  pageSize: number;
}

/**
 * Register the KPL Lab panels, views, commands, palette items and launcher entries.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'KPL Lab: a one-stop AI development workbench inside JupyterLab',
  autoStart: true,
  optional: [ICommandPalette, ILauncher, ISettingRegistry, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ) => {
    const settings: ISettings = { refreshInterval: 2, pageSize: 24 };
    const views = new Map<string, Widget>();

    /**
     * Show a main-area view, reusing the one with the same id when it is open.
     */
    const showView = <T extends Widget>(id: string, create: () => T): T => {
      let view = views.get(id) as T | undefined;
      if (!view || view.isDisposed) {
        view = create();
        views.set(id, view);
        view.disposed.connect(() => views.delete(id));
        app.shell.add(view, 'main');
      }
      app.shell.activateById(view.id);
      return view;
    };

    const datasetsModel = new PollingListModel<IDataset>(
      q => DatasetsAPI.list(q),
      settings.refreshInterval * 5
    );
    const algorithmsModel = new PollingListModel<IAlgorithm>(
      q => AlgorithmsAPI.list(q),
      settings.refreshInterval * 5
    );
    const jobsModel = new PollingListModel<IJob>(
      state => JobsAPI.list((state || undefined) as JobState | undefined),
      settings.refreshInterval
    );

    const openDataset = (name: string, version: string) =>
      showView(
        `dataset:${name}:${version}`,
        () => new DatasetViewer(name, version, settings.pageSize)
      );
    const openJob = (id: string): JobView =>
      showView(
        `job:${id}`,
        () => new JobView(id, settings.refreshInterval, openJob)
      );
    const openForm = (algorithm: string, version: string, fn: string) =>
      showView(
        `submit:${algorithm}:${version}:${fn}`,
        () =>
          new SubmitJobForm(algorithm, version, fn, job => {
            void jobsModel.refresh();
            openJob(job.id);
          })
      );

    const datasetsPanel = new DatasetsPanel(datasetsModel, openDataset);
    const algorithmsPanel = new AlgorithmsPanel(algorithmsModel, openForm);
    const jobsPanel = new JobsPanel(jobsModel, openJob);
    const panels: [Widget, PollingListModel<unknown>, number][] = [
      [datasetsPanel, datasetsModel as PollingListModel<unknown>, 600],
      [algorithmsPanel, algorithmsModel as PollingListModel<unknown>, 601],
      [jobsPanel, jobsModel as PollingListModel<unknown>, 602]
    ];
    for (const [panel, model, rank] of panels) {
      app.shell.add(panel, 'left', { rank });
      restorer?.add(panel, panel.id);
      // Poll only while the panel is visible: a hidden sidebar costs the server nothing.
      panel.disposed.connect(() => model.dispose());
      model.start();
    }

    const applySettings = (loaded: ISettingRegistry.ISettings) => {
      settings.refreshInterval = loaded.get('refreshInterval').composite as number;
      settings.pageSize = loaded.get('pageSize').composite as number;
      datasetsModel.interval = settings.refreshInterval * 5;
      algorithmsModel.interval = settings.refreshInterval * 5;
      jobsModel.interval = settings.refreshInterval;
      for (const view of views.values()) {
        if (view instanceof JobView) {
          view.interval = settings.refreshInterval;
        } else if (view instanceof DatasetViewer) {
          view.size = settings.pageSize;
        }
      }
    };
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          applySettings(loaded);
          loaded.changed.connect(applySettings);
        })
        .catch(reason =>
          console.error('KPL Lab: cannot load the settings.', reason)
        );
    }

    const { commands } = app;
    commands.addCommand(CommandIDs.about, {
      label: 'About KPL Lab',
      caption: 'Show the versions of the KPL Lab extension and server',
      icon: kplIcon,
      execute: () => showAbout(frontendVersion, app.serviceManager.serverSettings)
    });
    commands.addCommand(CommandIDs.openDatasets, {
      label: 'Open KPL Datasets',
      caption: 'Show the Datasets panel',
      icon: datasetsIcon,
      execute: () => app.shell.activateById(datasetsPanel.id)
    });
    commands.addCommand(CommandIDs.openAlgorithms, {
      label: 'Open KPL Algorithms',
      caption: 'Show the Algorithms panel',
      icon: algorithmsIcon,
      execute: () => app.shell.activateById(algorithmsPanel.id)
    });
    commands.addCommand(CommandIDs.openJobs, {
      label: 'Open KPL Jobs',
      caption: 'Show the Jobs panel',
      icon: jobsIcon,
      execute: () => app.shell.activateById(jobsPanel.id)
    });
    commands.addCommand(CommandIDs.uploadDataset, {
      label: 'Upload KPL Dataset…',
      caption: 'Upload a zip or tar archive as a new dataset version',
      icon: datasetsIcon,
      execute: () => {
        app.shell.activateById(datasetsPanel.id);
        datasetsPanel.chooseFile();
      }
    });
    commands.addCommand(CommandIDs.openDataset, {
      label: args => (args.name ? `Open Dataset ${args.name}` : 'Open KPL Dataset'),
      execute: args => openDataset(String(args.name), String(args.version))
    });
    commands.addCommand(CommandIDs.submitJob, {
      label: 'Submit KPL Job…',
      caption: 'Submit a job of an algorithm function (pick one in the Algorithms panel)',
      icon: jobsIcon,
      execute: args => {
        if (args.algorithm && args.version) {
          return openForm(
            String(args.algorithm),
            String(args.version),
            String(args.function ?? 'train')
          );
        }
        app.shell.activateById(algorithmsPanel.id);
      }
    });
    commands.addCommand(CommandIDs.openJob, {
      label: args => (args.id ? `Open Job ${args.id}` : 'Open KPL Job'),
      execute: args => openJob(String(args.id))
    });

    for (const command of [
      CommandIDs.openDatasets,
      CommandIDs.openAlgorithms,
      CommandIDs.openJobs,
      CommandIDs.uploadDataset,
      CommandIDs.submitJob,
      CommandIDs.about
    ]) {
      palette?.addItem({ command, category: CATEGORY });
    }
    launcher?.add({ command: CommandIDs.openDatasets, category: CATEGORY, rank: 1 });
    launcher?.add({ command: CommandIDs.submitJob, category: CATEGORY, rank: 2 });
    launcher?.add({ command: CommandIDs.about, category: CATEGORY, rank: 100 });
  }
};

export default plugin;
