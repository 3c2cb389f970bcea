"""Reports: HTML and Markdown from run directories (never from training code)."""
