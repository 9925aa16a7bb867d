"""What a run leaves and shows: its folder layout, metrics rows, summary, tracker and console."""
