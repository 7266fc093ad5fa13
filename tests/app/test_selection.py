"""app/selection.py: reading Plotly selections as Streamlit reports them."""
from app import selection as sel

GRID_EVENT = {"selection": {"points": [
    {"curve_number": 3, "point_index": 1, "customdata": [5, 2]},
    {"curve_number": 3, "point_index": 2, "customdata": [7, 2]},
    {"curve_number": 4, "point_index": 0, "customdata": [5, 2]},     # the same point again
    {"curve_number": 9, "point_index": 0, "customdata": [99, 0]},    # beyond the points
    {"curve_number": 1, "point_index": 0}]}}                          # no customdata


def test_grid_clicks_map_to_points_and_the_first_panel():
    assert sel.clicked_occurrences(GRID_EVENT, n_points=8, n_panels=3) == ([5, 7], 2)
    assert sel.clicked_occurrences(None, 8, 3) == ([], None)
    # what a real browser sends for a numpy customdata row (the browser test found it)
    browser = {"selection": {"points": [{"curve_number": 5, "point_index": 3,
                                         "customdata": {"0": 7, "1": 2}}]}}
    assert sel.clicked_occurrences(browser, n_points=8, n_panels=3) == ([7], 2)
    assert sel.clicked_occurrences({"selection": {"points": []}}, 8, 3) == ([], None)


def test_head_view_clicks_focus_a_token_and_a_second_click_unfocuses():
    options = ["(all)", "0: [CLS]", "1: your", "2: mouse"]
    event = {"selection": {"points": [{"curve_number": 7, "customdata": 2},
                                      {"curve_number": 0, "point_index": 3}]}}
    assert sel.clicked_tokens(event) == [2]
    assert sel.toggle_focus("(all)", options, 2) == "2: mouse"
    assert sel.toggle_focus("2: mouse", options, 2) == "(all)"
    assert sel.toggle_focus("1: your", options, 2) == "2: mouse"
    assert sel.toggle_focus("1: your", options, 3) == "1: your"     # no such token


def test_a_model_view_click_opens_the_layer_and_head_of_its_thumbnail():
    # trace 0 is the thumbnails' heatmap; trace 1 holds a marker per (layer, head), row by row
    event = {"selection": {"points": [{"curve_number": 0, "point_index": 0},
                                      {"curve_number": 1, "point_index": 7},
                                      {"curve_number": 1, "point_index": 2}]}}
    assert sel.clicked_cell(event, n_cols=4) == (1, 3)
    assert sel.clicked_cell({"selection": {"points": [{"curve_number": 0, "point_index": 5}]}},
                            n_cols=4) is None
    assert sel.clicked_cell(None, n_cols=4) is None


def test_occurrences_round_trip_through_the_url_and_bad_parts_are_skipped():
    ids = [(0, 1), (12, 3)]
    assert sel.parse_occurrences(sel.format_occurrences(ids)) == ids
    assert sel.parse_occurrences("3:4,x:1,5,,-1:2, 6 : 7") == [(3, 4), (6, 7)]
    assert sel.parse_occurrences(None) == []
