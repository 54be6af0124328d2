"""The console (offscreen): its views, models and the application around them."""
