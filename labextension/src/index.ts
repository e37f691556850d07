import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { showAbout } from './about';
import { AlgorithmsPanel } from './algorithms';
import { KPLClient } from './api';
import { DatasetsPanel } from './datasets';
import { DatasetViewer, datasetWidget } from './datasetViewer';
import {
  algorithmsIcon,
  datasetsIcon,
  experimentsIcon,
  jobsIcon,
  kplIcon,
  modelsIcon,
  pipelinesIcon,
  servicesIcon
} from './icons';
import { JobsPanel } from './jobs';
import { JobView, jobWidget } from './jobView';
import { LabellingView } from './labellingView';
import { CompareView } from './compareView';
import {
  PIPELINE_FACTORY,
  PIPELINE_FILE_TYPE,
  PIPELINE_SUFFIX,
  PipelineEditorFactory
} from './pipelineEditor';
import { PipelinesPanel } from './pipelines';
import {
  ExperimentsPanel,
  ExperimentView,
  experimentWidget
} from './experiments';
import { DeploymentView, deploymentWidget } from './deploymentView';
import { ServicesPanel } from './services';
import { ModelsPanel } from './models';
import { ModelView, modelWidget } from './modelView';
import { NewSearchForm } from './searchForm';
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
  export const compareJobs = 'kpl-lab:compare-jobs';
  export const openPipelines = 'kpl-lab:open-pipelines';
  export const openExperiments = 'kpl-lab:open-experiments';
  export const openExperiment = 'kpl-lab:open-experiment';
  export const openServices = 'kpl-lab:open-services';
  export const openDeployment = 'kpl-lab:open-deployment';
  export const openModels = 'kpl-lab:open-models';
  export const openModel = 'kpl-lab:open-model';
  export const labelTask = 'kpl-lab:label-task';
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
    const client = new KPLClient(app.serviceManager.serverSettings);
    const jobs = new WidgetTracker<MainAreaWidget<JobView>>({
      namespace: 'kpl-lab-job'
    });
    const datasets = new WidgetTracker<MainAreaWidget<DatasetViewer>>({
      namespace: 'kpl-lab-dataset'
    });
    const experiments = new WidgetTracker<MainAreaWidget<ExperimentView>>({
      namespace: 'kpl-lab-experiment'
    });
    const deployments = new WidgetTracker<MainAreaWidget<DeploymentView>>({
      namespace: 'kpl-lab-deployment'
    });
    const models = new WidgetTracker<MainAreaWidget<ModelView>>({
      namespace: 'kpl-lab-model'
    });
    const forms = new Map<string, MainAreaWidget<SubmitJobForm>>();
    const labelling = new Map<string, MainAreaWidget<LabellingView>>();

    const openDataset = (name: string, version: string) => {
      let widget = datasets.find(
        w => w.content.name === name && w.content.version === version
      );
      if (!widget) {
        widget = datasetWidget(client, name, version, settings.pageSize);
        void datasets.add(widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      return widget;
    };
    const openJob = (id: string) => {
      let widget = jobs.find(w => w.content.jobId === id);
      if (!widget) {
        widget = jobWidget(client, id, settings.refreshInterval, openJob);
        void jobs.add(widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      return widget;
    };
    const openDeployment = (name: string) => {
      let widget = deployments.find(w => w.content.name === name);
      if (!widget) {
        widget = deploymentWidget(client, name, settings.refreshInterval);
        widget.disposed.connect(() => void servicesPanel.model.refresh());
        void deployments.add(widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      return widget;
    };
    const openModel = (name: string, version: string) => {
      let widget = models.find(w => w.content.name === name);
      if (!widget) {
        widget = modelWidget(client, name, version, {
          openJob,
          openDataset,
          openModel,
          openDeployment: name => {
            void servicesPanel.model.refresh();
            openDeployment(name);
          },
          changed: () => void modelsPanel.model.refresh()
        });
        void models.add(widget);
        app.shell.add(widget, 'main');
      } else if (version && widget.content.version !== version) {
        void widget.content.select(version);
      }
      app.shell.activateById(widget.id);
      return widget;
    };
    const openForm = (algorithm: string, version: string, fn: string) => {
      const key = `${algorithm}:${version}:${fn}`;
      let widget = forms.get(key);
      if (!widget || widget.isDisposed) {
        widget = new MainAreaWidget({
          content: new SubmitJobForm(client, algorithm, version, fn, job => {
            void jobsPanel.model.refresh();
            openJob(job.id);
          })
        });
        widget.id = `kpl-submit-${algorithm}-${version}-${fn}`;
        widget.title.closable = true;
        forms.set(key, widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      return widget;
    };

    app.docRegistry.addFileType({
      name: PIPELINE_FILE_TYPE,
      displayName: 'KPL Pipeline',
      extensions: [PIPELINE_SUFFIX],
      pattern: '.*\\.kpl-pipeline\\.yaml$',
      mimeTypes: ['text/x-yaml'],
      fileFormat: 'text',
      contentType: 'file',
      icon: kplIcon
    });
    app.docRegistry.addWidgetFactory(
      new PipelineEditorFactory(
        {
          name: PIPELINE_FACTORY,
          modelName: 'text',
          fileTypes: [PIPELINE_FILE_TYPE],
          defaultFor: [PIPELINE_FILE_TYPE]
        },
        client,
        (name, version) => openDataset(name, version)
      )
    );

    const datasetsPanel = new DatasetsPanel(
      client,
      settings.refreshInterval * 5,
      openDataset
    );
    const algorithmsPanel = new AlgorithmsPanel(
      client,
      settings.refreshInterval * 5,
      openForm
    );
    const compareJobs = (ids: string[]) => {
      const widget = new MainAreaWidget({
        content: new CompareView(client, ids)
      });
      widget.id = `kpl-compare-${ids.join('-')}`;
      widget.title.closable = true;
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
      return widget;
    };
    const jobsPanel = new JobsPanel(
      client,
      settings.refreshInterval,
      openJob,
      compareJobs
    );
    const pipelinesPanel = new PipelinesPanel(
      client,
      settings.refreshInterval * 5,
      {
        contents: app.serviceManager.contents,
        open: path =>
          void app.commands.execute('docmanager:open', {
            path,
            factory: PIPELINE_FACTORY
          })
      }
    );

    const openExperiment = (name: string) => {
      let widget = experiments.find(w => w.content.experimentName === name);
      if (!widget) {
        widget = experimentWidget(
          client,
          name,
          settings.refreshInterval,
          openJob
        );
        void experiments.add(widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      return widget;
    };
    let searchForm: MainAreaWidget<NewSearchForm> | null = null;
    const newSearch = () => {
      if (!searchForm || searchForm.isDisposed) {
        searchForm = new MainAreaWidget({
          content: new NewSearchForm(client, experiment => {
            void experimentsPanel.model.refresh();
            searchForm?.close();
            openExperiment(experiment.name);
          })
        });
        searchForm.id = 'kpl-new-search';
        searchForm.title.closable = true;
        searchForm.title.icon = experimentsIcon;
        app.shell.add(searchForm, 'main');
      }
      app.shell.activateById(searchForm.id);
      return searchForm;
    };
    const experimentsPanel = new ExperimentsPanel(
      client,
      settings.refreshInterval * 2,
      openExperiment,
      newSearch
    );
    const servicesPanel = new ServicesPanel(
      client,
      settings.refreshInterval,
      openDeployment
    );
    const modelsPanel = new ModelsPanel(
      client,
      settings.refreshInterval * 5,
      openModel
    );
    [
      datasetsPanel,
      algorithmsPanel,
      jobsPanel,
      pipelinesPanel,
      experimentsPanel,
      modelsPanel,
      servicesPanel
    ].forEach((panel, index) => {
      app.shell.add(panel, 'left', { rank: 600 + index });
      restorer?.add(panel, panel.id);
    });

    const applySettings = (loaded: ISettingRegistry.ISettings) => {
      settings.refreshInterval = loaded.get('refreshInterval')
        .composite as number;
      settings.pageSize = loaded.get('pageSize').composite as number;
      datasetsPanel.model.interval = settings.refreshInterval * 5;
      algorithmsPanel.model.interval = settings.refreshInterval * 5;
      jobsPanel.model.interval = settings.refreshInterval;
      pipelinesPanel.model.interval = settings.refreshInterval * 5;
      servicesPanel.model.interval = settings.refreshInterval;
      modelsPanel.model.interval = settings.refreshInterval * 5;
      deployments.forEach(widget => {
        widget.content.interval = settings.refreshInterval;
      });
      jobs.forEach(widget => {
        widget.content.interval = settings.refreshInterval;
      });
      experimentsPanel.model.interval = settings.refreshInterval * 2;
      experiments.forEach(widget => {
        widget.content.interval = settings.refreshInterval;
      });
      datasets.forEach(widget => {
        widget.content.size = settings.pageSize;
      });
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
      execute: () => showAbout(frontendVersion, client)
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
    commands.addCommand(CommandIDs.openPipelines, {
      label: 'Open KPL Pipelines',
      caption: 'Show the Pipelines panel',
      icon: pipelinesIcon,
      execute: () => app.shell.activateById(pipelinesPanel.id)
    });
    commands.addCommand(CommandIDs.openServices, {
      label: 'Open KPL Services',
      caption: 'Show the Services panel (deployments)',
      icon: servicesIcon,
      execute: () => app.shell.activateById(servicesPanel.id)
    });
    commands.addCommand(CommandIDs.openDeployment, {
      label: args =>
        args.name ? `Open Deployment ${args.name}` : 'Open KPL Deployment',
      execute: args => openDeployment(String(args.name))
    });
    commands.addCommand(CommandIDs.openModels, {
      label: 'Open KPL Models',
      caption: 'Show the Models panel (registry)',
      icon: modelsIcon,
      execute: () => app.shell.activateById(modelsPanel.id)
    });
    commands.addCommand(CommandIDs.openModel, {
      label: args => (args.name ? `Open Model ${args.name}` : 'Open KPL Model'),
      execute: args => openModel(String(args.name), String(args.version ?? ''))
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
      label: args =>
        args.name ? `Open Dataset ${args.name}` : 'Open KPL Dataset',
      execute: args => openDataset(String(args.name), String(args.version))
    });
    commands.addCommand(CommandIDs.submitJob, {
      label: 'Submit KPL Job…',
      caption:
        'Submit a job of an algorithm function (pick one in the Algorithms panel)',
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
    commands.addCommand(CommandIDs.compareJobs, {
      label: 'Compare KPL jobs',
      execute: args => compareJobs((args.ids as string[]) ?? [])
    });
    commands.addCommand(CommandIDs.openExperiments, {
      label: 'Open KPL Experiments',
      caption: 'Show the Experiments panel',
      icon: experimentsIcon,
      execute: () => app.shell.activateById(experimentsPanel.id)
    });
    commands.addCommand(CommandIDs.openExperiment, {
      label: args =>
        args.name ? `Open Experiment ${args.name}` : 'Open KPL Experiment',
      execute: args => openExperiment(String(args.name))
    });
    const labelTask = (name: string) => {
      const id = `kpl-label-${name}`;
      let widget = labelling.get(id);
      if (widget === undefined || widget.isDisposed) {
        widget = new MainAreaWidget({
          content: new LabellingView(client, name)
        });
        widget.id = id;
        widget.title.closable = true;
        labelling.set(id, widget);
        app.shell.add(widget, 'main');
      }
      app.shell.activateById(widget.id);
      widget.content.node.focus();
      return widget;
    };
    commands.addCommand(CommandIDs.labelTask, {
      label: args =>
        args.name ? `Label ${args.name}` : 'Label a KPL Annotation Task…',
      caption: 'Label the records of an annotation task with the keyboard',
      execute: async args => {
        let name = args.name ? String(args.name) : '';
        if (!name) {
          const answer = await InputDialog.getText({
            title: 'Label an annotation task',
            label: 'Task name (kpl-lab annotation list)'
          });
          name = answer.button.accept ? (answer.value ?? '').trim() : '';
        }
        return name ? labelTask(name) : undefined;
      }
    });
    commands.addCommand(CommandIDs.openJob, {
      label: args => (args.id ? `Open Job ${args.id}` : 'Open KPL Job'),
      execute: args => openJob(String(args.id))
    });

    // Job, dataset, experiment, model and deployment views come back after a reload.
    if (restorer) {
      void restorer.restore(jobs, {
        command: CommandIDs.openJob,
        args: widget => ({ id: widget.content.jobId }),
        name: widget => widget.content.jobId
      });
      void restorer.restore(experiments, {
        command: CommandIDs.openExperiment,
        args: widget => ({ name: widget.content.experimentName }),
        name: widget => widget.content.experimentName
      });
      void restorer.restore(datasets, {
        command: CommandIDs.openDataset,
        args: widget => ({
          name: widget.content.name,
          version: widget.content.version
        }),
        name: widget => `${widget.content.name}:${widget.content.version}`
      });
      void restorer.restore(models, {
        command: CommandIDs.openModel,
        args: widget => ({
          name: widget.content.name,
          version: widget.content.version
        }),
        name: widget => widget.content.name
      });
      void restorer.restore(deployments, {
        command: CommandIDs.openDeployment,
        args: widget => ({ name: widget.content.name }),
        name: widget => widget.content.name
      });
    }

    for (const command of [
      CommandIDs.openDatasets,
      CommandIDs.openAlgorithms,
      CommandIDs.openJobs,
      CommandIDs.openPipelines,
      CommandIDs.openExperiments,
      CommandIDs.openModels,
      CommandIDs.openServices,
      CommandIDs.uploadDataset,
      CommandIDs.submitJob,
      CommandIDs.labelTask,
      CommandIDs.about
    ]) {
      palette?.addItem({ command, category: CATEGORY });
    }
    launcher?.add({
      command: CommandIDs.openDatasets,
      category: CATEGORY,
      rank: 1
    });
    launcher?.add({
      command: CommandIDs.submitJob,
      category: CATEGORY,
      rank: 2
    });
    launcher?.add({ command: CommandIDs.about, category: CATEGORY, rank: 100 });
  }
};

export default plugin;
