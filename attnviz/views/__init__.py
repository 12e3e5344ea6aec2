"""Plain data -> what a screen shows: Plotly figures, PNG images, DataFrames, downloads.

spec (figures as ready Plotly JSON), heatmaps, images (mosaics, PNG), charts (bars, lines,
diagrams), grid (several maps in one figure), colour (the palette and the weights' colour
scales), lines (the lines view),
panels (the figures of each explorer view, shared by the app and notebooks), frames (DataFrames
for tables and CSV), export (JSON / .npz downloads), notebook (attnviz.show), projector (figures
for a projected screen).

May import: attnviz.engine, attnviz.measures, attnviz.training, attnviz.i18n, plotly, numpy, pandas.
Never lessons, serve, ui or streamlit. Every token label is HTML-escaped here.
"""
