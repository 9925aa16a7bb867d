"""What a run leaves and shows: its folder layout, summary, tracker and console."""
