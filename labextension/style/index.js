import 'uplot/dist/uPlot.min.css';
import '@xyflow/react/dist/style.css';
import './base.css';
