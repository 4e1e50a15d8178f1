from interp.cli import main

main()
