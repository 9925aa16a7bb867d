"""`python -m trainer.sweep dashboard`: a live page of a sweep in the browser, read-only over its
store; Plotly (the `[dashboard]` extra) draws the charts."""
