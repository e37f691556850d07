import {
  InputGroup,
  LabIcon,
  refreshIcon,
  ReactWidget,
  SidePanel,
  ToolbarButton
} from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Panel } from '@lumino/widgets';
import React from 'react';

import { PollingListModel } from './model';

/**
 * A KPL sidebar: a title, a toolbar with Refresh, and a list that a poll keeps fresh
 * while the panel is shown (a hidden sidebar costs the server nothing).
 */
export class KPLSidePanel<T> extends SidePanel {
  constructor(options: KPLSidePanel.IOptions<T>) {
    super({ content: new Panel() });
    this.id = options.id;
    this.addClass('kpl-Panel');
    this.title.icon = options.icon;
    this.title.caption = options.caption;
    this.model = new PollingListModel<T>({
      fetcher: options.fetcher,
      interval: options.interval,
      name: options.id,
      standby: () => !this.isVisible || 'when-hidden'
    });
    this.header.addWidget(
      ReactWidget.create(
        <header className="kpl-Panel-header">
          <h2>{options.label}</h2>
        </header>
      )
    );
    this.toolbar.addItem(
      'refresh',
      new ToolbarButton({
        icon: refreshIcon,
        tooltip: 'Refresh',
        onClick: () => void this.model.refresh()
      })
    );
    void this.model.start();
  }

  /**
   * The list shown in the panel.
   */
  readonly model: PollingListModel<T>;

  /**
   * Show a React element as the panel's content, below the toolbar.
   */
  protected addContent(element: JSX.Element): void {
    const content = ReactWidget.create(element);
    content.addClass('kpl-Panel-content');
    this.addWidget(content);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  /**
   * Catch up at once when shown: the poll skipped its fetches while hidden.
   */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
  }
}

/**
 * The search box of a KPL sidebar: it filters the panel's list as the user types.
 */
export function SearchBox<T>(props: {
  what: string;
  model: PollingListModel<T>;
}): JSX.Element {
  return (
    <InputGroup
      className="kpl-search"
      type="search"
      placeholder={`Search ${props.what}`}
      aria-label={`Search ${props.what}`}
      rightIcon="ui-components:search"
      onChange={event => {
        props.model.filter = event.target.value.trim();
      }}
    />
  );
}

export namespace KPLSidePanel {
  export interface IOptions<T> {
    id: string;
    label: string;
    caption: string;
    icon: LabIcon;
    fetcher: (filter: string) => Promise<T[]>;
    interval: number;
  }
}
