"""Quick start: build a query, run it, and watch demand at work.

Run: .venv/bin/python examples/quickstart.py
"""

from reaqtive import CallbackSubscriber, SimpleSubject, from_iterable


def main() -> None:
    # A query is data: building it runs nothing.
    query = from_iterable(range(1, 11)).map(lambda x: x * x).filter(lambda x: x % 2 == 0)
    print("query:", query)

    # run() binds the expression to operators and starts them; this sink asks for 3 elements at a time.
    squares: list[int] = []
    query.run(CallbackSubscriber(squares.append, batch_size=3))
    print("even squares:", squares)

    # A hot source: push events into a subject; each subscriber gets them according to its own demand.
    readings = SimpleSubject[float](name="temperature")
    alerts: list[str] = []
    readings.as_query().filter(lambda t: t > 30.0).map(lambda t: f"hot: {t}").run(alerts.append)
    for temperature in (21.5, 31.0, 29.9, 35.2):
        readings.on_next(temperature)
    readings.on_complete()
    print("alerts:", alerts)


if __name__ == "__main__":
    main()
