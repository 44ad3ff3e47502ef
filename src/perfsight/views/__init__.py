"""Views: render analysis results (terminal text here; export files and the web UI elsewhere). Views never compute."""
