from interp.pipelines.cli import main

main()
